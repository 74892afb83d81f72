package identity

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse: a SPIFFE ID comes from a certificate whoever holds the CA's
// trust wrote, and from flags and files. Parse either refuses it with a
// short error of UTF-8 text, or gives an ID whose text parses back to the
// same ID, within the bounds the SPIFFE ID specification sets.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"spiffe://cluster.local/ns/tidal/sa/tidal-decider",
		"spiffe://example.org/workload/batch",
		"spiffe://cluster.local/ns/../sa/x",
		"spiffe://cluster.local/ns//sa/x",
		"spiffe://cluster.local/",
		"spiffe://cluster.local",
		"spiffe://Cluster.Local/ns/a/sa/b",
		"spiffe://cluster.local:8443/ns/a/sa/b",
		"spiffe://user@cluster.local/ns/a/sa/b",
		"spiffe://cluster.local/ns/a/sa/b?x=1#f",
		"spiffe://cluster.local/ns/a%2Fb/sa/c",
		"SPIFFE://cluster.local/ns/a/sa/b",
		"https://cluster.local/ns/a/sa/b",
		"spiffe://cluster.local/ns/a/sa/b\n\x1b[2J",
		"spiffe://" + strings.Repeat("a", MaxLen),
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			if msg := err.Error(); len(msg) > 512 || !utf8.ValidString(msg) {
				t.Fatalf("a %d-byte error (valid UTF-8: %v); want a bounded quote of the input", len(msg), utf8.ValidString(msg))
			}
			if !id.IsZero() {
				t.Fatalf("Parse(%q) = %v with an error", s, id)
			}
			return
		}
		if id.IsZero() || id.String() != s || len(s) > MaxLen {
			t.Fatalf("Parse(%q) = %q", s, id)
		}
		again, err := Parse(id.String())
		if err != nil || again != id {
			t.Fatalf("Parse(%q) round trip: %v, %v", s, again, err)
		}
		if ns, sa, ok := id.ServiceAccount(); ok {
			if back, err := New(id.TrustDomain(), ns, sa); err != nil || back != id {
				t.Fatalf("ServiceAccount of %s: %s/%s rebuilds %v, %v", id, ns, sa, back, err)
			}
		}
	})
}
