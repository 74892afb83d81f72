package keda

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc/credentials"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) {
	// KEDA's scalers log through controller-runtime's global logger; without
	// one set, their errors would be lost (and controller-runtime complains).
	logf.SetLogger(kedaLog.logger())
	// KEDA's resolver, run in this process, reads the Secrets of
	// ClusterTriggerAuthentications in KEDA's namespace, which it learns
	// from this variable as the operator does.
	if err := os.Setenv("KEDA_CLUSTER_OBJECT_NAMESPACE", kedaNamespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster.Main(m)
}

// kedaLog sends KEDA's log lines to the test that runs now (the tests of this
// package run one at a time), or to stderr between tests.
var kedaLog testLog

type testLog struct{ t atomic.Pointer[testing.T] }

func (l *testLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		line := "keda: " + prefix + " " + args
		if t := l.t.Load(); t != nil {
			t.Log(line)
			return
		}
		fmt.Fprintln(os.Stderr, line)
	}, funcr.Options{Verbosity: 0})
}

// follow makes KEDA's log lines part of t's output until t ends.
func (l *testLog) follow(t *testing.T) {
	l.t.Store(t)
	t.Cleanup(func() { l.t.CompareAndSwap(t, nil) })
}

// binaries builds the three services once per test binary (`make keda`
// compiles them first, so this only links).
var binaries struct {
	once sync.Once
	dir  string
	err  error
	log  bytes.Buffer
}

func binDir(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		binaries.dir, binaries.err = system.BuildTemp(ctx, &binaries.log)
	})
	if binaries.err != nil {
		t.Fatalf("build: %v\n%s", binaries.err, binaries.log.String())
	}
	return binaries.dir
}

// The identities of the test's mutual TLS: the three services as a release
// "tidal" in namespace "tidal" (the services' default --authz-* identities),
// Knative's activator pushing stats, and KEDA's operator calling the
// external scaler.
const trustDomain = "cluster.local"

var ids = map[string]identity.ID{
	"collector": identity.MustNew(trustDomain, "tidal", "tidal-collector"),
	"decider":   identity.MustNew(trustDomain, "tidal", "tidal-decider"),
	"actuator":  identity.MustNew(trustDomain, "tidal", "tidal-actuator"),
	"activator": identity.MustNew(trustDomain, "knative-serving", "activator"),
	"keda":      identity.MustNew(trustDomain, "keda", "keda-operator"),
	// reader is the tests' own observer (a dashboard), reading every
	// namespace by --authz-readers: KEDA's identity may not, since it is
	// bound to its own namespace.
	"reader": identity.MustNew(trustDomain, "monitoring", "dashboard"),
}

// certs is one CA and a certificate per identity, written as
// kubernetes.io/tls Secret layouts under dir/NAME.
type certs struct {
	dir   string
	caPEM []byte
}

func newCerts(t *testing.T) *certs {
	t.Helper()
	ca, err := pki.NewCA("tidal keda test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &certs{dir: t.TempDir(), caPEM: ca.CertPEM}
	for name, id := range ids {
		leaf := pki.Leaf{ID: id, Validity: time.Hour}
		if name == "collector" || name == "decider" || name == "actuator" {
			// KEDA dials the scalerAddress it is given, here 127.0.0.1:PORT,
			// and checks the server's certificate for that host.
			leaf.DNSNames = []string{"localhost"}
			leaf.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		iss, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		if err := ca.WriteDir(filepath.Join(c.dir, name), iss); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *certs) files(name string) pki.Files { return pki.DirFiles(filepath.Join(c.dir, name)) }

// flags are a service's TLS flags.
func (c *certs) flags(name string) []string {
	f := c.files(name)
	return []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-file", f.CA}
}

// pem returns name's certificate and key in PEM, as a ClusterTriggerAuthentication
// hands them to KEDA (tlsClientCert, tlsClientKey).
func (c *certs) pem(t *testing.T, name string) (cert, key []byte) {
	t.Helper()
	f := c.files(name)
	cert, err := os.ReadFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	key, err = os.ReadFile(f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// creds are gRPC client credentials holding name's certificate.
func (c *certs) creds(t *testing.T, name string) credentials.TransportCredentials {
	t.Helper()
	cert, key := c.pem(t, name)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS13})
}

// kpaConfig is the config-autoscaler of the decider and the actuator: a short
// scale-to-zero grace, as in test/e2e.
var kpaConfig = map[string]string{"scale-to-zero-grace-period": "6s"}

// startTidal runs the actuator, the decider and one collector as processes
// against c, every connection under mutual TLS, until t ends; with kafka,
// also a kfake broker in this process, given to the collector and the
// actuator. It starts them itself rather than with system.Start, which runs
// them in plaintext. The collector's Proc dials as the activator (which may
// push stats); the others' as a reader of every namespace.
func startTidal(t *testing.T, c *cluster.Cluster, tc *certs, kafka bool) *system.System {
	t.Helper()
	bin := binDir(t)
	logDir := t.TempDir()
	cfgDir := t.TempDir()
	keys := make([]string, 0, len(kpaConfig))
	for k := range kpaConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(kpaConfig[k]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys := &system.System{Cluster: c, LogDir: logDir}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range sys.Procs() {
				testkit.KeepLog(t, p.Name, p.LogTail(1<<20))
			}
		}
		if err := sys.Stop(); err != nil {
			t.Errorf("stop tidal: %v", err)
		}
	})
	start := func(name, svc, caller string, args ...string) *system.Proc {
		p, err := system.NewProc(name, bin, svc, logDir, append(args, tc.flags(svc)...)...)
		if err != nil {
			t.Fatal(err)
		}
		p.Creds = tc.creds(t, caller)
		if err := p.Start(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("tidal: %s serving on %s", name, p.GRPCAddr)
		return p
	}
	var brokers []string
	if kafka {
		kf, err := kfake.NewCluster(kfake.NumBrokers(1)) // listens on 127.0.0.1
		if err != nil {
			t.Fatalf("kafka: %v", err)
		}
		sys.Kafka, sys.Brokers = kf, kf.ListenAddrs() // System.Stop closes it
		brokers = []string{"--kafka-brokers", strings.Join(sys.Brokers, ",")}
	}
	readers := []string{"--authz-readers", ids["reader"].String()}
	sys.Actuator = start("actuator", "actuator", "reader", append(append([]string{
		"--scaler", "kubernetes", "--kubeconfig", c.Kubeconfig, "--config-autoscaler", cfgDir}, brokers...), readers...)...)
	sys.Decider = start("decider", "decider", "reader", append([]string{
		"--actuator-addr", sys.Actuator.GRPCAddr, "--config-autoscaler", cfgDir}, readers...)...)
	sys.Collectors = []*system.Proc{start("collector-0", "collector", "activator", append([]string{
		"--decider-addr", sys.Decider.GRPCAddr, "--collector-id", "collector-0", "--kubeconfig", c.Kubeconfig,
		"--authz-pushers", ids["activator"].String(), "--authz-keda", ids["keda"].String(),
		// Inline triggers name the tests' own kfake brokers, on loopback
		// ports chosen at random.
		"--allowed-brokers", "127.0.0.1:*"}, brokers...)...)}
	return sys
}
