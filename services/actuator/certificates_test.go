package main

import (
	"strings"
	"testing"
)

// TestCertificatesSpec: the certificate Job's --spec is read strictly, and
// a refusal names the field and quotes a bounded prefix of the value.
func TestCertificatesSpec(t *testing.T) {
	const good = `{"ca": {"namespace": "tidal", "name": "tidal-tls-ca"}, "caName": "tidal CA", "validity": "8760h",
		"identities": [{"secret": {"namespace": "tidal", "name": "tidal-decider-tls"}, "id": "spiffe://cluster.local/ns/tidal/sa/tidal-decider", "dnsNames": ["tidal-decider.tidal.svc"]}]}`
	spec, err := parseSpec(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Identities[0].DNSNames[0]; got != "tidal-decider.tidal.svc" || spec.Validity.String() != "8760h0m0s" {
		t.Errorf("parsed %+v", spec)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"unknown field", strings.Replace(good, `"caName"`, `"caNmae"`, 1), `unknown field "caNmae"`},
		{"bad validity", strings.Replace(good, `"8760h"`, `"a year"`, 1), `duration "a year"`},
		{"numeric validity", strings.Replace(good, `"8760h"`, `8760`, 1), "want a quoted string"},
		{"bad identity", strings.Replace(good, `spiffe://cluster.local/ns/tidal/sa/tidal-decider`, `https://x`, 1), "identities[0].id"},
		{"two values", good + good, "more than one JSON value"},
		{"not JSON", strings.Repeat("{", 5000), "--spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSpec(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes: want a bounded quote", len(err.Error()))
			}
		})
	}
}
