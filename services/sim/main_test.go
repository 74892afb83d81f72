package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	png := filepath.Join(t.TempDir(), "out.png")
	tests := []struct {
		name string
		f    flags
		want []string
	}{
		{"rates with a plot", flags{config: "../../sim/testdata/configs.yaml", rates: "../../sim/testdata/makerun.csv", plot: png, seed: 1},
			[]string{"knative-defaults", "scale-down-delay-5m", "plot: " + png}},
		{"azure, one function", flags{config: "../../sim/testdata/configs.yaml", azure: "../../sim/testdata/azure-sample.csv", limit: 1, seed: 1},
			[]string{"knative-defaults", "kpa        1"}},
		{"lag", flags{config: "../../sim/testdata/lag.yaml", rates: "../../sim/testdata/records.csv", seed: 1},
			[]string{"riff-idle-10s", "lag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f.validate(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(&tt.f, &out); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, out.String())
				}
			}
		})
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Fatalf("plot %s: %v", png, err)
	}
}

func TestFlagsRefused(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-rates", "x.csv"}, "-config: required"},
		{[]string{"-config", "c.yaml"}, "exactly one of"},
		{[]string{"-config", "c.yaml", "-rates", "a", "-azure", "b"}, "exactly one of"},
		{[]string{"-config", "c.yaml", "-rates", "a", "-limit", "3"}, "only with -azure"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-limit", "-3"}, "-limit -3"},
	}
	for _, tt := range tests {
		var f flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if err := f.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestBadInputNamesLineAndField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("second,rate\n0,3\n1,-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := flags{config: "../../sim/testdata/configs.yaml", rates: bad}
	err := run(&f, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "field rate") {
		t.Fatalf("run on a negative rate: %v, want line 3, field rate", err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("configurations:\n- name: a\n  autoscaler: {stable-windw: 30s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f = flags{config: cfg, rates: "../../sim/testdata/makerun.csv"}
	if err := run(&f, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "stable-windw") {
		t.Fatalf("run with an unknown key: %v, want it named", err)
	}
}
