package certsecret_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/certsecret"
	"github.com/tidalscale/tidal/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

const validity = 90 * 24 * time.Hour

func specFor(ns string) certsecret.Spec {
	return certsecret.Spec{
		CA:       certsecret.Ref{Namespace: ns, Name: "tidal-tls-ca"},
		CAName:   "tidal CA " + ns,
		Validity: certsecret.Duration(validity),
		Labels:   map[string]string{"app.kubernetes.io/part-of": "tidal"},
		Identities: []certsecret.Identity{
			{
				Secret:   certsecret.Ref{Namespace: ns, Name: "tidal-collector-tls"},
				ID:       "spiffe://cluster.local/ns/" + ns + "/sa/tidal-collector",
				DNSNames: []string{"tidal-collector", "tidal-collector." + ns + ".svc"},
				Labels:   map[string]string{"app.kubernetes.io/component": "collector"},
			},
			{
				Secret: certsecret.Ref{Namespace: ns, Name: "tidal-reader-tls"},
				ID:     "spiffe://cluster.local/ns/" + ns + "/sa/tidal-reader",
			},
		},
	}
}

// secrets reads every Secret of spec by name.
func secrets(t *testing.T, client kubernetes.Interface, spec certsecret.Spec) map[string]*corev1.Secret {
	t.Helper()
	out := map[string]*corev1.Secret{}
	for _, ref := range append([]certsecret.Ref{spec.CA}, refs(spec)...) {
		sec, err := client.CoreV1().Secrets(ref.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("secret %s: %v", ref, err)
		}
		out[ref.Name] = sec
	}
	return out
}

func refs(spec certsecret.Spec) []certsecret.Ref {
	var out []certsecret.Ref
	for _, id := range spec.Identities {
		out = append(out, id.Secret)
	}
	return out
}

func ensure(t *testing.T, client kubernetes.Interface, spec certsecret.Spec, now time.Time) map[string]certsecret.Result {
	t.Helper()
	res, err := certsecret.Ensure(context.Background(), client, spec, now)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]certsecret.Result{}
	for _, r := range res {
		out[r.Secret.Name] = r
	}
	if len(out) != len(spec.Identities)+1 {
		t.Fatalf("results %v: want one per Secret", res)
	}
	return out
}

func issued(res map[string]certsecret.Result) []string {
	var out []string
	for name, r := range res {
		if r.Issued {
			out = append(out, name)
		}
	}
	return out
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM in %q", b)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestEnsure runs the certificate Job's work against a real API server:
// the first run makes the CA and a certificate per identity whose one URI
// SAN is its SPIFFE ID; a second run changes nothing; a certificate in the
// last third of its life, one naming another identity and an unreadable
// one are signed anew, alone; a lost CA is made anew with every
// certificate.
func TestEnsure(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	client := c.Client
	spec := specFor(ns)
	now := time.Now()

	res := ensure(t, client, spec, now)
	if got := issued(res); len(got) != 3 {
		t.Fatalf("first run issued %v, want the CA and both certificates", got)
	}
	first := secrets(t, client, spec)
	caCert := parseCert(t, first["tidal-tls-ca"].Data["tls.crt"])
	if !caCert.IsCA || caCert.NotAfter.Before(now.Add(9*validity)) {
		t.Errorf("CA: IsCA %v, NotAfter %s; want a CA valid ten times a certificate's validity", caCert.IsCA, caCert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	for _, want := range spec.Identities {
		sec := first[want.Secret.Name]
		if sec.Type != corev1.SecretTypeTLS || !bytes.Equal(sec.Data["ca.crt"], first["tidal-tls-ca"].Data["tls.crt"]) {
			t.Errorf("%s: type %s, ca.crt of the CA %v", sec.Name, sec.Type, bytes.Equal(sec.Data["ca.crt"], first["tidal-tls-ca"].Data["tls.crt"]))
		}
		cert := parseCert(t, sec.Data["tls.crt"])
		// Identity from the URI SAN alone: no reliance on the common name.
		id, err := identity.FromCertificate(cert)
		if err != nil || id.String() != want.ID || len(cert.URIs) != 1 {
			t.Errorf("%s: identity %v, %v (%d URI SANs); want %s as the one URI SAN", sec.Name, id, err, len(cert.URIs), want.ID)
		}
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if len(want.DNSNames) > 0 {
			opts.DNSName = want.DNSNames[1]
			opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: %v", sec.Name, err)
		}
		if got := sec.Annotations[certsecret.AnnotationID]; got != want.ID {
			t.Errorf("%s: annotation %s = %q, want %q", sec.Name, certsecret.AnnotationID, got, want.ID)
		}
		if sec.Labels["app.kubernetes.io/part-of"] != "tidal" {
			t.Errorf("%s: labels %v, want the spec's", sec.Name, sec.Labels)
		}
	}
	if got := first["tidal-collector-tls"].Labels["app.kubernetes.io/component"]; got != "collector" {
		t.Errorf("tidal-collector-tls: component label %q, want the identity's own", got)
	}

	// Nothing to do: no write at all.
	if got := issued(ensure(t, client, spec, now.Add(validity/2))); len(got) != 0 {
		t.Errorf("second run issued %v, want nothing", got)
	}
	for name, sec := range secrets(t, client, spec) {
		if sec.ResourceVersion != first[name].ResourceVersion {
			t.Errorf("%s written by a run with nothing to do", name)
		}
	}

	// The last third of their life: both certificates, not the CA.
	res = ensure(t, client, spec, now.Add(validity*2/3+time.Hour))
	if got := issued(res); len(got) != 2 || res["tidal-tls-ca"].Issued {
		t.Errorf("run in the last third issued %v, want both certificates and not the CA", got)
	}
	if r := res["tidal-reader-tls"]; !strings.Contains(r.Reason, "last third") {
		t.Errorf("reader: reason %q, want the last third of its life", r.Reason)
	}
	renewed := secrets(t, client, spec)
	if bytes.Equal(renewed["tidal-reader-tls"].Data["tls.key"], first["tidal-reader-tls"].Data["tls.key"]) {
		t.Error("a renewed certificate kept its key")
	}

	// Another identity, and an unreadable certificate: only those.
	spec.Identities[1].ID = "spiffe://cluster.local/ns/" + ns + "/sa/someone-else"
	broken := renewed["tidal-collector-tls"].DeepCopy()
	broken.Data["tls.crt"] = []byte("not a certificate")
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res = ensure(t, client, spec, now)
	if got := issued(res); len(got) != 2 || res["tidal-tls-ca"].Issued {
		t.Errorf("issued %v, want the two changed certificates only", got)
	}
	cert := parseCert(t, secrets(t, client, spec)["tidal-reader-tls"].Data["tls.crt"])
	if id, _ := identity.FromCertificate(cert); id.String() != spec.Identities[1].ID {
		t.Errorf("reader names %s, want %s", id, spec.Identities[1].ID)
	}

	// A lost CA: a new one, and every certificate signed by it.
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), "tidal-tls-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := issued(ensure(t, client, spec, now)); len(got) != 3 {
		t.Errorf("after the CA was deleted, issued %v; want the CA and both certificates", got)
	}
	after := secrets(t, client, spec)
	if bytes.Equal(after["tidal-tls-ca"].Data["tls.crt"], first["tidal-tls-ca"].Data["tls.crt"]) {
		t.Error("the CA was not made anew")
	}
	for _, ref := range refs(spec) {
		if !bytes.Equal(after[ref.Name].Data["ca.crt"], after["tidal-tls-ca"].Data["tls.crt"]) {
			t.Errorf("%s: ca.crt is not the new CA", ref.Name)
		}
	}
}

// TestSpecValidate: a spec the Job cannot keep is refused before any write,
// naming the field and a bounded prefix of the value.
func TestSpecValidate(t *testing.T) {
	long := "spiffe://cluster.local/" + strings.Repeat("x", 5000) + "/é"
	for _, tc := range []struct {
		name string
		edit func(*certsecret.Spec)
		want string
	}{
		{"no CA", func(s *certsecret.Spec) { s.CA = certsecret.Ref{} }, "ca:"},
		{"no CA name", func(s *certsecret.Spec) { s.CAName = "" }, "caName"},
		{"no validity", func(s *certsecret.Spec) { s.Validity = 0 }, "validity"},
		{"no secret", func(s *certsecret.Spec) { s.Identities[1].Secret.Name = "" }, "identities[1].secret"},
		{"twice", func(s *certsecret.Spec) { s.Identities[1].Secret = s.Identities[0].Secret }, "named twice"},
		{"the CA's", func(s *certsecret.Spec) { s.Identities[0].Secret = s.CA }, "named twice"},
		{"bad id", func(s *certsecret.Spec) { s.Identities[0].ID = "http://x/y" }, "identities[0].id"},
		{"long id", func(s *certsecret.Spec) { s.Identities[1].ID = long }, "identities[1].id"},
		{"bad DNS name", func(s *certsecret.Spec) {
			s.Identities[0].DNSNames = []string{"ok.svc", "Not_A_Name" + strings.Repeat("x", 300)}
		}, "identities[0].dnsNames[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := specFor("tidal")
			tc.edit(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes: want a bounded quote", len(err.Error()))
			}
		})
	}
	s := specFor("tidal")
	if err := s.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
}
