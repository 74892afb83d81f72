package keda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEShowsExamples: every example these tests run is in the README,
// whole and as it is in its file, so what users copy is what was tested.
func TestREADMEShowsExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
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
		if !strings.Contains(string(readme), "```yaml\n"+string(b)+"```") {
			t.Errorf("README.md does not show %s as it is (a ```yaml block holding the whole file)", p)
		}
	}
}
