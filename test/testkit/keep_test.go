package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeepLog: the text lands in a file under os.TempDir()'s tidal-failed,
// named for the test and the process, and older runs beyond keptRuns go.
func TestKeepLog(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	root := filepath.Join(tmp, "tidal-failed")
	for i := range keptRuns + 5 {
		if err := os.MkdirAll(filepath.Join(root, "20000101T0000"+string(rune('a'+i))+"-1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	KeepLog(t, "collector/0 log", "one\ntwo\n")
	if keep.err != nil {
		t.Fatal(keep.err)
	}
	if filepath.Dir(keep.dir) != root {
		t.Fatalf("kept in %s, want a directory of %s", keep.dir, root)
	}
	b, err := os.ReadFile(filepath.Join(keep.dir, "TestKeepLog", "collector_0_log.log"))
	if err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("kept %q (%v), want the text", b, err)
	}
	// 25 old runs and this one: the six oldest go.
	runs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != keptRuns || runs[len(runs)-1].Name() != filepath.Base(keep.dir) || !strings.HasPrefix(runs[0].Name(), "20000101T0000g") {
		t.Errorf("after pruning: %d runs from %s to %s, want the newest %d ending with this one", len(runs), runs[0].Name(), runs[len(runs)-1].Name(), keptRuns)
	}
}
