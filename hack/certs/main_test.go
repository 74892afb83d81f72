package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/identity"
)

func load(t *testing.T, dir string) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	return leaf, pool
}

func TestRun(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	if err := run([]string{"-namespace", "prod", "-keda-namespace", "keda-system", "-prefix", "tidal-all", "-secrets", "-identity", "alice=spiffe://example.org/ops/alice", out}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"collector": "spiffe://cluster.local/ns/prod/sa/tidal-all-collector",
		"decider":   "spiffe://cluster.local/ns/prod/sa/tidal-all-decider",
		"actuator":  "spiffe://cluster.local/ns/prod/sa/tidal-all-actuator",
		"pusher":    "spiffe://cluster.local/ns/prod/sa/tidal-all-pusher",
		"operator":  "spiffe://cluster.local/ns/prod/sa/tidal-all-operator",
		"keda":      "spiffe://cluster.local/ns/prod/sa/tidal-all-keda",
		"reader":    "spiffe://cluster.local/ns/prod/sa/tidal-all-reader",
		"alice":     "spiffe://example.org/ops/alice",
	} {
		leaf, pool := load(t, filepath.Join(out, name))
		id, err := identity.FromCertificate(leaf)
		if err != nil || id.String() != want {
			t.Errorf("%s: identity %v, %v; want %s", name, id, err, want)
		}
		opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if name == "decider" {
			opts.DNSName = "tidal-all-decider.prod.svc"
			opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output does not list %s", want)
		}
		b, err := os.ReadFile(filepath.Join(out, name, "secret.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var sec corev1.Secret
		if err := yaml.UnmarshalStrict(b, &sec); err != nil {
			t.Fatalf("%s/secret.yaml: %v", name, err)
		}
		// KEDA's Secret goes where KEDA reads it; its identity stays.
		wantNS := "prod"
		if name == "keda" {
			wantNS = "keda-system"
		}
		if sec.Type != corev1.SecretTypeTLS || sec.Name != "tidal-all-"+name+"-tls" || sec.Namespace != wantNS || len(sec.Data["tls.key"]) == 0 || len(sec.Data["ca.crt"]) == 0 {
			t.Errorf("%s/secret.yaml: %s/%s type %s keys %d", name, sec.Namespace, sec.Name, sec.Type, len(sec.Data))
		}
	}
	if st, err := os.Stat(filepath.Join(out, "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v", err)
	}

	// Signing with the CA just made: the new certificate chains to it.
	again := t.TempDir()
	if err := run([]string{"-ca-cert", filepath.Join(out, "ca.crt"), "-ca-key", filepath.Join(out, "ca.key"), "-only", "operator", again}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	leaf, _ := load(t, filepath.Join(again, "operator"))
	_, pool := load(t, filepath.Join(out, "decider"))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate signed with -ca-cert: %v", err)
	}
	if _, err := os.Stat(filepath.Join(again, "decider")); !os.IsNotExist(err) {
		t.Errorf("-only operator also wrote decider: %v", err)
	}
	if _, err := os.Stat(filepath.Join(again, "ca.key")); !os.IsNotExist(err) {
		t.Errorf("a given CA's key was copied: %v", err)
	}
}

func TestRunRefuses(t *testing.T) {
	t.Chdir(t.TempDir()) // nothing refused may write, but if it did, not here
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{}, "OUTDIR"},
		{[]string{"-namespace", "a/b", "x"}, "-namespace"},
		{[]string{"-keda-namespace", "K", "x"}, "-keda-namespace"},
		{[]string{"-ca-cert", "ca.crt", "x"}, "-ca-key"},
		{[]string{"-identity", "Bob=spiffe://x/y", "x"}, "NAME=SPIFFE_ID"},
		{[]string{"-identity", "bob=spiffe://x", "x"}, "want a path"},
		{[]string{"-only", "nobody", t.TempDir()}, "no identity named"},
		{[]string{"-validity", "0s", "x"}, "-validity"},
	} {
		err := run(tt.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %v = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
