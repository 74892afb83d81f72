package cluster

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/testkit"
)

// A component that dies during start-up fails the wait at once, with its
// log's last lines in the error.
func TestWaitReportsExitWithLogTail(t *testing.T) {
	dir := t.TempDir()
	p, err := startProcess(dir, "broken", "/bin/sh", "-c", "for i in $(seq 1 50); do echo line $i; done; echo 'fatal: bad flag --nope'; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = waitHTTP(context.Background(), http.DefaultClient, p, "http://127.0.0.1:1/healthz", "", time.Minute)
	if err == nil {
		t.Fatal("waitHTTP succeeded for a process that exited")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("waitHTTP took %s to notice the exit, want it at once", time.Since(start))
	}
	msg := err.Error()
	for _, want := range []string{"broken exited: exit status 3", "fatal: bad flag --nope", "line 50", "last 30 lines"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "line 20\n") {
		t.Errorf("error %q has more than the last 30 lines", msg)
	}
}

// A component that never answers fails the wait at the timeout, with its log.
func TestWaitTimesOutWithLogTail(t *testing.T) {
	p, err := startProcess(t.TempDir(), "slow", "/bin/sh", "-c", "echo starting slowly; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(time.Second)
	err = waitHTTP(context.Background(), http.DefaultClient, p, "http://127.0.0.1:1/healthz", "", 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "slow not ready") || !strings.Contains(err.Error(), "starting slowly") {
		t.Errorf("waitHTTP error = %v, want a timeout naming slow with its log", err)
	}
}

// stop kills the whole process group, children included.
func TestStopKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	p, err := startProcess(dir, "parent", "/bin/sh", "-c", "sleep 60 & echo $! > child.pid; trap '' TERM; wait")
	if err != nil {
		t.Fatal(err)
	}
	var child int
	testkit.Eventually(t, 5*time.Second, "the child's pid file", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "child.pid"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return child != 0
	})
	p.stop(200 * time.Millisecond) // the parent ignores SIGTERM: SIGKILL after the grace
	time.Sleep(100 * time.Millisecond)
	if processAlive(child) && !isZombie(child) {
		t.Errorf("child %d of the stopped group is still running", child)
	}
}

// A directory left by a test binary that died is removed, and a component
// still running from it is killed; a live owner's directory is left alone.
func TestReapStale(t *testing.T) {
	root := t.TempDir()
	stale := filepath.Join(root, dirPrefix+"stale")
	live := filepath.Join(root, dirPrefix+"live")
	for _, d := range []string{stale, live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan, err := startProcess(stale, "etcd", "/bin/sh", "-c", "sleep 60; : "+stale)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(stale, "owner.pid"), strconv.Itoa(dead.Process.Pid))
	writeFile(t, filepath.Join(live, "owner.pid"), strconv.Itoa(os.Getpid()))
	// Start returns once the child is in execve, whose command line reads
	// empty for a moment; an orphan reapStale finds started long before.
	testkit.Eventually(t, 5*time.Second, "the orphan's command line naming its directory", func() bool {
		return cmdlineMentions(orphan.cmd.Process.Pid, stale)
	})

	reapStale(root)

	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale directory still exists (stat error %v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live owner's directory was removed: %v", err)
	}
	select {
	case <-orphan.exited:
		if ws, ok := orphan.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("orphan exit = %v, want killed by SIGKILL", orphan.cmd.ProcessState)
		}
	case <-time.After(5 * time.Second):
		orphan.stop(time.Second)
		t.Error("orphaned component still running after reapStale")
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

func TestFileTail(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		n             int
		want          string
	}{
		{"fewer lines than n", "a\nb\n", 5, "a\nb"},
		{"the last n", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no final newline", "a\nb\nc", 2, "b\nc"},
		{"empty", "", 3, ""},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := FileTail(path, tt.n); err != nil || got != tt.want {
			t.Errorf("%s: FileTail = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if _, err := FileTail(filepath.Join(dir, "absent"), 1); err == nil {
		t.Error("FileTail of a missing file: no error")
	}
}
