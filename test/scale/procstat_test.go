package scale

import (
	"os"
	"testing"
)

func TestProgramName(t *testing.T) {
	for _, c := range []struct{ cmdline, want string }{
		{"/root/.cache/tidal/kube-v1.37.2/kube\x00kube-apiserver\x00--etcd-servers=http://127.0.0.1:2379\x00", "kube kube-apiserver"},
		{"/root/.cache/tidal/kube-v1.37.2/kube\x00etcd\x00--data-dir\x00/tmp/x\x00", "kube etcd"},
		{"/root/.cache/tidal/kube-v1.37.2/kwok\x00-c\x00/tmp/stages.yaml\x00", "kwok"},
		{"/tmp/bin/tidal-actuator\x00--kubeconfig=/tmp/c/kubeconfig\x00", "tidal-actuator"},
		{"sleep\x0030\x00", "sleep"},
		{"sh\x00/tmp/script\x00", "sh"},
		{"", "?"},
		{"\x00", "?"},
	} {
		if got := programName([]byte(c.cmdline)); got != c.want {
			t.Errorf("programName(%q) = %q, want %q", c.cmdline, got, c.want)
		}
	}
}

func TestByProgram(t *testing.T) {
	// The same process (init) twice: one group of two pids.
	pid := []int{1, 1}
	g := byProgram("x: ", pid)
	if len(g) != 1 || len(g[0].pids) != 2 || g[0].name != "x: "+processName(1) {
		t.Fatalf("byProgram = %+v, want one group of both pids named %q", g, "x: "+processName(1))
	}
	// This test and init: two programs, in order of name.
	self := os.Getpid()
	g = byProgram("x: ", []int{self, 1, self})
	if len(g) != 2 || g[0].name > g[1].name {
		t.Fatalf("byProgram = %+v, want two groups in order of name", g)
	}
	for _, grp := range g {
		want := 1
		if grp.name == "x: "+processName(self) {
			want = 2
		}
		if len(grp.pids) != want {
			t.Errorf("group %q holds %v, want %d pids", grp.name, grp.pids, want)
		}
	}
}
