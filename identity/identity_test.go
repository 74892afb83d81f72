package identity

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
		ns, sa  string
	}{
		{in: "spiffe://cluster.local/ns/tidal/sa/tidal-decider", ns: "tidal", sa: "tidal-decider"},
		{in: "spiffe://example.org/workload"},
		{in: "spiffe://td_1.example-2/a.b/C_d-e"},
		{in: "", wantErr: "scheme"},
		{in: "https://cluster.local/ns/a/sa/b", wantErr: "scheme"},
		{in: "SPIFFE://cluster.local/ns/a/sa/b", wantErr: "scheme"},
		{in: "spiffe://", wantErr: "empty trust domain"},
		{in: "spiffe:///ns/a", wantErr: "empty trust domain"},
		{in: "spiffe://cluster.local", wantErr: "want a path"},
		{in: "spiffe://cluster.local/", wantErr: "want a path"},
		{in: "spiffe://Cluster.local/ns/a", wantErr: "trust domain"},
		{in: "spiffe://cluster.local:8443/ns/a", wantErr: "trust domain"},
		{in: "spiffe://user@cluster.local/ns/a", wantErr: "trust domain"},
		{in: "spiffe://cluster.local/ns//a", wantErr: "segment 2: empty"},
		{in: "spiffe://cluster.local/ns/a/", wantErr: "segment 3: empty"},
		{in: "spiffe://cluster.local/ns/../a", wantErr: `".."`},
		{in: "spiffe://cluster.local/./a", wantErr: `"."`},
		{in: "spiffe://cluster.local/ns/a?x=1", wantErr: "byte '?'"},
		{in: "spiffe://cluster.local/ns/a#f", wantErr: "byte '#'"},
		{in: "spiffe://cluster.local/ns/a%20b", wantErr: "byte '%'"},
		{in: "spiffe://cluster.local/" + strings.Repeat("a", MaxLen), wantErr: "longer than 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 60)], func(t *testing.T) {
			id, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want an error containing %q", tt.in, id, err, tt.wantErr)
				}
				if len(err.Error()) > 250 {
					t.Errorf("error quotes too much of the input: %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if id.String() != tt.in {
				t.Errorf("String() = %q, want %q", id, tt.in)
			}
			ns, sa, ok := id.ServiceAccount()
			if ok != (tt.ns != "") || ns != tt.ns || sa != tt.sa {
				t.Errorf("ServiceAccount() = %q, %q, %v; want %q, %q", ns, sa, ok, tt.ns, tt.sa)
			}
		})
	}
}

func TestNew(t *testing.T) {
	id, err := New("cluster.local", "tidal", "tidal-actuator")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.String(), "spiffe://cluster.local/ns/tidal/sa/tidal-actuator"; got != want {
		t.Errorf("New = %s, want %s", got, want)
	}
	if _, err := New("cluster.local", "", "x"); err == nil {
		t.Error("New with an empty namespace: no error")
	}
	if !(ID{}).IsZero() || id.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestFromCertificate(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	const want = "spiffe://cluster.local/ns/tidal/sa/tidal-decider"
	tests := []struct {
		name    string
		cert    *x509.Certificate
		want    string
		wantErr string
	}{
		{name: "one URI SAN", cert: &x509.Certificate{URIs: []*url.URL{uri(want)}}, want: want},
		{name: "URI SAN, not the common name", cert: &x509.Certificate{URIs: []*url.URL{uri(want)}, Subject: pkix.Name{CommonName: "spiffe://cluster.local/ns/x/sa/y"}}, want: want},
		{name: "two URI SANs", cert: &x509.Certificate{URIs: []*url.URL{uri(want), uri(want)}}, wantErr: "2 URI SANs"},
		{name: "non-SPIFFE URI SAN", cert: &x509.Certificate{URIs: []*url.URL{uri("https://example.com/x")}}, wantErr: "URI SAN"},
		{name: "an ID in the common name only", cert: &x509.Certificate{Subject: pkix.Name{CommonName: want}}, wantErr: "names no SPIFFE ID"},
		{name: "common name not an ID", cert: &x509.Certificate{Subject: pkix.Name{CommonName: "tidal.tidal.svc"}}, wantErr: "names no SPIFFE ID"},
		{name: "CA certificate", cert: &x509.Certificate{IsCA: true, URIs: []*url.URL{uri(want)}}, wantErr: "CA"},
		{name: "nil", wantErr: "no certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := FromCertificate(tt.cert)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromCertificate = %v, %v; want an error containing %q", id, err, tt.wantErr)
				}
				return
			}
			if err != nil || id.String() != tt.want {
				t.Fatalf("FromCertificate = %v, %v; want %s", id, err, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	if got := Quote(strings.Repeat("x", 1000)); len(got) > quoteLen+10 {
		t.Errorf("Quote kept %d bytes", len(got))
	}
	if got := Quote("a\nb"); got != `"a\nb"` {
		t.Errorf("Quote = %s", got)
	}
}
