package server

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestCgroupMemoryLimit(t *testing.T) {
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	cases := []struct {
		name    string
		files   map[string]string
		want    int64
		source  string
		wantErr string
	}{
		{"v2 limit", map[string]string{v2: "536870912\n"}, 536870912, v2, ""},
		{"v2 none", map[string]string{v2: "max\n", v1: "1024"}, 0, v2, ""},
		{"v1 limit", map[string]string{v1: "268435456\n"}, 268435456, v1, ""},
		{"v1 none", map[string]string{v1: "9223372036854771712\n"}, 0, v1, ""},
		{"not in a cgroup", map[string]string{}, 0, "", ""},
		{"garbage", map[string]string{v2: strings.Repeat("x", 100)}, 0, v2, `not a byte count: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"`},
		{"negative", map[string]string{v2: "-1"}, 0, v2, "not a byte count"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, v := range c.files {
				fsys[strings.TrimPrefix(p, "/")] = &fstest.MapFile{Data: []byte(v)}
			}
			got, src, err := cgroupMemoryLimit(fsys, cgroupMemoryFiles)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want || src != c.source {
				t.Errorf("= %d, %q, %v; want %d, %q", got, src, err, c.want, c.source)
			}
		})
	}
}
