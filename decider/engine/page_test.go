package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// listAll pages through x with page size k and returns the keys seen.
func listAll(t *testing.T, x *Index, namespace string, k int) []string {
	t.Helper()
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		ds, next := x.Page(namespace, after, k)
		if len(ds) > k {
			t.Fatalf("page of %d decisions, want at most %d", len(ds), k)
		}
		for _, d := range ds {
			keys = append(keys, d.Target.Key())
		}
		if next == "" {
			return keys
		}
		after = next
	}
}

func TestIndexPages(t *testing.T) {
	e, _ := newEngine(t)
	var want []string
	// "ns-a" sorts between "ns" and "ns/": a namespace filter must not stop there.
	for _, ns := range []string{"ns", "ns-a", "nt"} {
		for i := range 7 {
			tg := Target{Namespace: ns, Name: fmt.Sprintf("t%02d", i)}
			if i == 3 {
				tg.APIVersion, tg.Kind = "apps/v1", "StatefulSet"
			}
			if err := e.Upsert(Spec{Target: tg, Strategy: KPA, Reachable: true}, epoch); err != nil {
				t.Fatal(err)
			}
			want = append(want, tg.Key())
		}
	}
	slices.Sort(want)
	now := epoch
	x := NewIndex(e, time.Second, func() time.Time { return now })
	for _, k := range []int{1, 2, 5, 21, 100} {
		if got := listAll(t, x, "", k); !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", k, got, want)
		}
	}
	var inNS []string
	for _, k := range want {
		if strings.HasPrefix(k, "ns/") {
			inNS = append(inNS, k)
		}
	}
	if got := listAll(t, x, "ns", 2); len(inNS) != 7 || !slices.Equal(got, inNS) {
		t.Errorf("namespace ns in pages of 2: %v, want %v", got, inNS)
	}

	// Between two pages a target before the cursor goes and one after it
	// goes: the listing skips the gone one and repeats nothing.
	ds, next := x.Page("", "", 4)
	if len(ds) != 4 || next != want[3] {
		t.Fatalf("first page = %d decisions, next %q; want 4 and %q", len(ds), next, want[3])
	}
	e.Remove(Target{Namespace: "ns-a", Name: "t00"}) // on the first page
	e.Remove(Target{Namespace: "nt", Name: "t06"})   // the last key
	var rest []string
	for after := next; after != ""; {
		ds, after = x.Page("", after, 4)
		for _, d := range ds {
			rest = append(rest, d.Target.Key())
		}
	}
	if wantRest := want[4 : len(want)-1]; !slices.Equal(rest, wantRest) {
		t.Errorf("after removals: %v, want %v", rest, wantRest)
	}

	// A listing under way keeps its snapshot: a target added after its
	// first page, after its cursor, is not listed by its later pages...
	_, next = x.Page("", "", 1)
	if err := e.Upsert(Spec{Target: Target{Namespace: "zz", Name: "new"}, Strategy: KPA}, epoch); err != nil {
		t.Fatal(err)
	}
	if ds, _ := x.Page("", next, 100); slices.ContainsFunc(ds, func(d Decision) bool { return d.Target.Namespace == "zz" }) {
		t.Errorf("a later page of a listing started before the target was added lists it: %v", ds)
	}
	// ...but a new listing shows every target created before it, however
	// young the index.
	if ds, _ := x.Page("zz", "", 10); len(ds) != 1 {
		t.Errorf("a new listing after a target was added: %d listed, want 1", len(ds))
	}
}
