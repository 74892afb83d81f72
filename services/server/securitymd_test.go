package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Other modules and tools are no proof of tidal's claims.
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "vendor" || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range named {
		if !funcs[n] {
			t.Errorf("SECURITY.md names %s, which is no test function of the repository: fix the claim or the name", n)
		}
	}
}
