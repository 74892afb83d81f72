package knativetest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/testkit"
)

var root = filepath.Join("..", "..", "..")

// knativeDocs are the README's Knative section and docs/knative.md.
func knativeDocs(t *testing.T) map[string]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "knative.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := string(readme)
	start, end := strings.Index(r, "\n## Knative\n"), strings.Index(r, "\n## KEDA\n")
	if start < 0 || end < start {
		t.Fatal("README.md has no section ## Knative before ## KEDA")
	}
	return map[string]string{"README.md's Knative section": r[start:end], "docs/knative.md": string(doc)}
}

// TestKnativeDocsNameRealTests: every test the README's Knative section and
// docs/knative.md name as proof of a claim is a test function of the
// repository, and the README names one for each of its claims.
func TestKnativeDocsNameRealTests(t *testing.T) {
	funcs, err := testkit.TestFunctions(root)
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range knativeDocs(t) {
		named := regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`).FindAllString(text, -1)
		if where == "README.md's Knative section" && len(named) < 5 {
			t.Errorf("%s names %d tests; want the live configuration, the mesh mode, who is in charge and the metrics proven", where, len(named))
		}
		for _, n := range named {
			if !funcs[n] {
				t.Errorf("%s names %s, which is no test function of the repository: fix the claim or the name", where, n)
			}
		}
	}
}

// TestKnativeDocsListKnativesMetrics: docs/knative.md's table of Knative's
// metrics lists exactly the families Knative's autoscaler exports (read
// from its source), each in a row with the file that defines it.
func TestKnativeDocsListKnativesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms, err := AutoscalerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doc := knativeDocs(t)["docs/knative.md"]
	start := strings.Index(doc, "### Knative's metrics\n")
	if start < 0 {
		t.Fatal("docs/knative.md has no section ### Knative's metrics")
	}
	section := doc[start:]
	if end := strings.Index(section[1:], "\n### "); end >= 0 {
		section = section[:end+1]
	}
	rows := map[string]string{} // family → its table row
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, name := range regexp.MustCompile("`(kn_[a-z_]+)`").FindAllStringSubmatch(cells[1], -1) {
			rows[name[1]] = line
		}
	}
	var want []string
	for _, m := range ms {
		want = append(want, m.Name)
		row, ok := rows[m.Name]
		if !ok {
			t.Errorf("docs/knative.md's table lacks %s (%s)", m.Name, m.File)
			continue
		}
		if !strings.Contains(row, "`"+m.File+"`") {
			t.Errorf("docs/knative.md: %s's row does not name %s: %s", m.Name, m.File, row)
		}
	}
	for name := range rows {
		if !slices.Contains(want, name) {
			t.Errorf("docs/knative.md's table lists %s, which Knative's autoscaler does not export", name)
		}
	}
}
