// Command certs makes the certificates of tidal's identities for
// development and tests: a CA, and for each kind of caller a certificate
// whose URI SAN is its SPIFFE ID, spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/PREFIX-NAME,
// the ServiceAccounts the chart creates for a release whose full name is
// PREFIX. It writes
//
//	OUTDIR/ca.crt, OUTDIR/ca.key          the CA (keep ca.key to itself)
//	OUTDIR/NAME/tls.crt, tls.key, ca.crt  per identity, for --tls-cert-file,
//	                                      --tls-key-file, --tls-ca-file and grpcurl
//	OUTDIR/NAME/secret.yaml               with -secrets: a kubernetes.io/tls
//	                                      Secret PREFIX-NAME-tls for tls.mode=secret
//
// for the services collector, decider and actuator (with the DNS names of
// their Services and of localhost) and the callers pusher (an activator
// pushing stats), operator (may scale and deploy by hand), keda (KEDA
// calling the collector's external scaler; its secret.yaml holds the keys a
// TriggerAuthentication reads) and reader (may only read). A service run
// with a pusher, an operator or KEDA needs them in --authz-pushers,
// --authz-operators and --authz-keda; the command prints the flags.
//
//	go run ./hack/certs -namespace tidal -prefix tidal bin/certs
//	go run ./hack/certs -ca-cert ca.crt -ca-key ca.key -identity alice=spiffe://cluster.local/ns/ops/sa/alice bin/certs
//
// Production certificates come from cert-manager (csi-driver-spiffe), a
// mesh, or the chart (tls.mode).
package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
)

// services are the identities that serve, and get their Service's DNS
// names; callers only call.
var (
	services = []string{"collector", "decider", "actuator"}
	callers  = []string{"pusher", "operator", "keda", "reader"}
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

// extraIDs is the repeatable -identity NAME=SPIFFE_ID flag.
type extraIDs map[string]identity.ID

func (e extraIDs) String() string { return fmt.Sprint(map[string]identity.ID(e)) }

func (e extraIDs) Set(v string) error {
	name, raw, ok := strings.Cut(v, "=")
	if !ok || !validName(name) {
		return fmt.Errorf("%s: want NAME=SPIFFE_ID with NAME of a-z, 0-9 and '-'", identity.Quote(v))
	}
	id, err := identity.Parse(raw)
	if err != nil {
		return err
	}
	e[name] = id
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789-", c) {
			return false
		}
	}
	return true
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trustDomain := fs.String("trust-domain", "cluster.local", "SPIFFE trust domain.")
	namespace := fs.String("namespace", "tidal", "Namespace of the ServiceAccounts (the release namespace).")
	prefix := fs.String("prefix", "tidal", "Prefix of the ServiceAccount names (the chart's full name): PREFIX-collector, ...")
	validity := fs.Duration("validity", 365*24*time.Hour, "How long the certificates are valid; a new CA is valid ten times as long.")
	caCert := fs.String("ca-cert", "", "Sign with this CA certificate (PEM) instead of making a CA; needs -ca-key.")
	caKey := fs.String("ca-key", "", "Key of -ca-cert (PEM).")
	secrets := fs.Bool("secrets", false, "Also write NAME/secret.yaml, a kubernetes.io/tls Secret PREFIX-NAME-tls in -namespace (keda's in -keda-namespace).")
	kedaNamespace := fs.String("keda-namespace", "", "Namespace of keda/secret.yaml: KEDA's own (the chart's keda.namespace), where its ClusterTriggerAuthentication reads it; empty means -namespace. The identity stays in -namespace.")
	only := fs.String("only", "", "Comma-separated names to issue (of collector, decider, actuator, pusher, operator, keda, reader and -identity names); empty means all.")
	extra := extraIDs{}
	fs.Var(extra, "identity", "Extra identity NAME=SPIFFE_ID to issue a certificate for; repeatable.")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./hack/certs [flags] OUTDIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one OUTDIR")
	}
	out := fs.Arg(0)
	if *validity <= 0 {
		return fmt.Errorf("-validity %s: want more than 0", *validity)
	}
	if *kedaNamespace == "" {
		*kedaNamespace = *namespace
	}
	for _, f := range []struct{ flag, v string }{{"namespace", *namespace}, {"keda-namespace", *kedaNamespace}, {"prefix", *prefix}} {
		if !validName(strings.ReplaceAll(f.v, ".", "-")) {
			return fmt.Errorf("-%s %s: want a Kubernetes name (a-z, 0-9, '-', '.')", f.flag, identity.Quote(f.v))
		}
	}
	if (*caCert == "") != (*caKey == "") {
		return errors.New("-ca-cert and -ca-key: give both or neither")
	}

	ids := map[string]identity.ID{}
	for _, name := range append(slices.Clone(services), callers...) {
		id, err := identity.New(*trustDomain, *namespace, *prefix+"-"+name)
		if err != nil {
			return fmt.Errorf("identity of %s from -trust-domain, -namespace, -prefix: %w", name, err)
		}
		ids[name] = id
	}
	for name, id := range extra {
		ids[name] = id
	}
	names := make([]string, 0, len(ids))
	for name := range ids {
		names = append(names, name)
	}
	if *only != "" {
		names = nil
		for _, n := range strings.Split(*only, ",") {
			if _, ok := ids[n]; !ok {
				return fmt.Errorf("-only: no identity named %s", identity.Quote(n))
			}
			names = append(names, n)
		}
	}
	slices.Sort(names)

	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	var ca *pki.CA
	var err error
	if *caCert != "" {
		if ca, err = pki.LoadCA(*caCert, *caKey); err != nil {
			return err
		}
	} else {
		if ca, err = pki.NewCA("tidal CA "+*trustDomain+" "+*namespace+"/"+*prefix, 10**validity); err != nil {
			return err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "ca.key"), keyPEM, 0o600); err != nil {
			return fmt.Errorf("write ca.key: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		return fmt.Errorf("write ca.crt: %w", err)
	}

	for _, name := range names {
		leaf := pki.Leaf{ID: ids[name], Validity: *validity}
		if slices.Contains(services, name) {
			svc := *prefix + "-" + name
			leaf.DNSNames = []string{svc, svc + "." + *namespace, svc + "." + *namespace + ".svc", svc + "." + *namespace + ".svc.cluster.local", "localhost"}
			leaf.IPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		iss, err := ca.Issue(leaf)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, name)
		if err := ca.WriteDir(dir, iss); err != nil {
			return err
		}
		if *secrets {
			ns := *namespace
			if name == "keda" {
				ns = *kedaNamespace
			}
			if err := writeSecret(filepath.Join(dir, "secret.yaml"), *prefix+"-"+name+"-tls", ns, iss, ca.CertPEM); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%-10s %s  %s/\n", name, ids[name], dir)
	}
	fmt.Fprintf(stdout, "\nA service: --tls-cert-file %[1]s/NAME/tls.crt --tls-key-file %[1]s/NAME/tls.key --tls-ca-file %[1]s/ca.crt \\\n", out)
	fmt.Fprintf(stdout, "  --authz-trust-domain %s --authz-namespace %s --authz-account-prefix %s --authz-pushers %s --authz-operators %s --authz-keda %s\n",
		*trustDomain, *namespace, *prefix, ids["pusher"], ids["operator"], ids["keda"])
	fmt.Fprintf(stdout, "grpcurl:   grpcurl -cacert %[1]s/ca.crt -cert %[1]s/reader/tls.crt -key %[1]s/reader/tls.key -servername localhost 127.0.0.1:9002 list\n", out)
	return nil
}

// writeSecret writes a kubernetes.io/tls Secret holding iss and the CA.
func writeSecret(path, name, namespace string, iss *pki.Issued, caPEM []byte) error {
	b64 := base64.StdEncoding.EncodeToString
	body := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: %s
type: kubernetes.io/tls
data:
  tls.crt: %s
  tls.key: %s
  ca.crt: %s
`, name, namespace, b64(iss.CertPEM), b64(iss.KeyPEM), b64(caPEM))
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
