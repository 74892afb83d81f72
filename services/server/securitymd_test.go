package server

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/tidalscale/tidal/test/testkit"
)

// TestSecurityNamesRealTests: every test and fuzz target SECURITY.md names
// as the proof of a claim is a function of some *_test.go file of the
// repository, so a renamed or deleted test shows here rather than leaving
// the page claiming what nothing checks.
func TestSecurityNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`).FindAllString(string(doc), -1)
	if len(named) < 20 {
		t.Fatalf("SECURITY.md names %d tests; want every claim to name its test", len(named))
	}
	funcs, err := testkit.TestFunctions(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range named {
		if !funcs[n] {
			t.Errorf("SECURITY.md names %s, which is no test function of the repository: fix the claim or the name", n)
		}
	}
}
