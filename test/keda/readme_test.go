package keda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEShowsExamples: every example these tests run is in docs/keda.md,
// whole and as it is in its file, and the README shows the main one, so what
// users copy is what was tested.
func TestREADMEShowsExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/keda.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	mainExample, err := os.ReadFile(filepath.Join(*examplesDir, "follow-podautoscaler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(mainExample)+"```") {
		t.Error("README.md does not show follow-podautoscaler.yaml as it is (a ```yaml block holding the whole file)")
	}
	paths, err := filepath.Glob(filepath.Join(*examplesDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples in %s (%v)", *examplesDir, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```yaml\n"+string(b)+"```") {
			t.Errorf("docs/keda.md does not show %s as it is (a ```yaml block holding the whole file)", p)
		}
	}
}
