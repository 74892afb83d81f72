package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidalscale/tidal/identity"
)

func TestIssueAndLoad(t *testing.T) {
	ca, err := NewCA("tidal test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id := identity.MustNew("cluster.local", "tidal", "tidal-decider")
	iss, err := ca.Issue(Leaf{ID: id, DNSNames: []string{"tidal-decider.tidal.svc"}, Validity: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if iss.Cert.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf outlives its CA: %s after %s", iss.Cert.NotAfter, ca.Cert.NotAfter)
	}
	dir := filepath.Join(t.TempDir(), "decider")
	if err := ca.WriteDir(dir, iss); err != nil {
		t.Fatal(err)
	}
	f := DirFiles(dir)
	if st, err := os.Stat(f.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, st.Mode())
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(f.CA)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt: %v", err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "tidal-decider.tidal.svc"}); err != nil {
			t.Errorf("verify for usage %v: %v", usage, err)
		}
	}
	got, err := identity.FromCertificate(leaf)
	if err != nil || got != id {
		t.Errorf("identity = %v, %v; want %v", got, err, id)
	}

	// The CA round-trips through its files, and what it signs then still
	// chains to the first.
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	caDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(caDir, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(caDir, "ca.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	iss2, err := again.Issue(Leaf{ID: id, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss2.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate of the reloaded CA: %v", err)
	}
	if _, err := LoadCA(f.Cert, f.Key); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
}

func TestIssueWithoutIdentity(t *testing.T) {
	ca, err := NewCA("tidal test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ca.Issue(Leaf{CommonName: "anonymous", Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.FromCertificate(iss.Cert); err == nil {
		t.Error("a certificate without SPIFFE ID has an identity")
	}
	if _, err := ca.Issue(Leaf{CommonName: "x"}); err == nil {
		t.Error("zero validity accepted")
	}
}
