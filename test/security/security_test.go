package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
	"github.com/tidalscale/tidal/proto/externalscaler"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server/servertest"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/system"
)

// binDir holds the three binaries, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	dir, err := system.BuildTemp(ctx, &log)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, log.String())
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	trustDomain = "cluster.local"
	namespace   = "tidal"
)

// The identities: the three services (the defaults of --authz-* for a
// release "tidal" in namespace "tidal"); a pusher, operators, KEDA, a
// deployer and a reader the services are told of; two tenants' identities
// with no role, each reading only its ServiceAccount's namespace; an
// operator bound to the first tenant's namespace and a dashboard bound to
// both tenants' by --authz-namespaces; and certificates
// the CA signed without any SPIFFE ID or with an ID of another trust
// domain.
var ids = map[string]identity.ID{
	"collector":       identity.MustNew(trustDomain, namespace, "tidal-collector"),
	"decider":         identity.MustNew(trustDomain, namespace, "tidal-decider"),
	"actuator":        identity.MustNew(trustDomain, namespace, "tidal-actuator"),
	"pusher":          identity.MustNew(trustDomain, "knative-serving", "activator"),
	"operator":        identity.MustNew(trustDomain, "ops", "oncall"),
	"keda":            identity.MustNew(trustDomain, "keda", "keda-operator"),
	"deployer":        identity.MustNew(trustDomain, "ci", "riff"),
	"reader":          identity.MustNew(trustDomain, "default", "grpcurl"),
	"tenant":          identity.MustNew(trustDomain, tenantA, "grpcurl"),
	"tenant operator": identity.MustNew(trustDomain, tenantA, "oncall"),
	"tenant b":        identity.MustNew(trustDomain, tenantB, "grpcurl"),
	"shared":          identity.MustNew(trustDomain, "dashboards", "tenants"),
	"foreign":         identity.MustNew("other.example", namespace, "tidal-decider"),
	"anonymous":       {},
}

// tenantA and tenantB are the tenants' namespaces.
const (
	tenantA = "team-a"
	tenantB = "team-b"
)

// scoped are the callers bound to namespaces, and to which: a request of
// theirs naming another namespace is refused.
var scoped = map[string][]string{"tenant": {tenantA}, "tenant operator": {tenantA}, "tenant b": {tenantB}, "shared": {tenantA, tenantB}}

// readers are the callers every read is open to, within their namespaces.
var readers = []string{"collector", "decider", "actuator", "pusher", "operator", "keda", "deployer", "reader", "tenant", "tenant operator", "tenant b", "shared"}

// allowed is the matrix the issue asks for, written out apart from the
// policy's code: which callers get past the check of each method. Every
// method the three binaries serve (listed through their server reflection,
// with every service declared in proto/) must have a row, so a new method
// fails TestSecurity until someone decides who may call it.
var allowed = servertest.Allowed(readers)

// fleet is the three services as processes, each with its own certificate,
// and a certificate directory per caller.
type fleet struct {
	ca                           *pki.CA
	root                         string
	dirs                         map[string]string
	collector, decider, actuator *system.Proc
}

// issue gives the caller name a certificate of id, signed by the fleet's
// CA: an identity the services were told nothing of, like the many a
// tenant's ServiceAccounts get.
func (f *fleet) issue(t *testing.T, name string, id identity.ID) {
	t.Helper()
	leaf := pki.Leaf{ID: id, Validity: time.Hour, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if id.IsZero() {
		leaf.CommonName = "tidal.tidal.svc"
	}
	iss, err := f.ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	f.dirs[name] = filepath.Join(f.root, strings.ReplaceAll(name, " ", "-"))
	if err := f.ca.WriteDir(f.dirs[name], iss); err != nil {
		t.Fatal(err)
	}
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	ca, err := pki.NewCA("tidal security test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{ca: ca, root: t.TempDir(), dirs: map[string]string{}}
	for name, id := range ids {
		f.issue(t, name, id)
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(svc string, args ...string) *system.Proc {
		files := pki.DirFiles(f.dirs[svc])
		args = append(args,
			"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-file", files.CA,
			"--authz-pushers", ids["pusher"].String(), "--authz-operators", ids["operator"].String()+","+ids["tenant operator"].String(),
			"--authz-keda", ids["keda"].String(), "--authz-deployers", ids["deployer"].String(), "--authz-readers", ids["reader"].String(),
			"--authz-namespaces", ids["tenant operator"].String()+"="+tenantA+";"+ids["shared"].String()+"="+tenantA+","+tenantB)
		p, err := system.NewProc(svc, binDir, svc, logDir, args...)
		if err != nil {
			t.Fatal(err)
		}
		p.Creds = f.creds(t, "reader")
		if err := p.Start(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Stop(10 * time.Second); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("--- %s log ---\n%s", svc, p.LogTail(30))
			}
		})
		return p
	}
	f.actuator = start("actuator", "--scaler", "memory")
	f.decider = start("decider", "--actuator-addr", f.actuator.GRPCAddr)
	// --activator-listen registers the ActivatorStatService too.
	f.collector = start("collector", "--discovery", "push", "--decider-addr", f.decider.GRPCAddr, "--activator-listen", "127.0.0.1:0")
	return f
}

// creds are a client's credentials holding caller's certificate.
func (f *fleet) creds(t *testing.T, caller string) credentials.TransportCredentials {
	t.Helper()
	files := pki.DirFiles(f.dirs[caller])
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13})
}

func (f *fleet) dial(t *testing.T, caller string, p *system.Proc) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(f.creds(t, caller)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// guardRefused says whether err is the authorization check's refusal (of
// the caller, or of a namespace outside its binding), not a handler's.
func guardRefused(err error) bool {
	msg := status.Convert(err).Message()
	return status.Code(err) == codes.PermissionDenied && (strings.Contains(msg, "may not call it") || strings.Contains(msg, "(--authz-namespaces)"))
}

// served lists every method the fleet's binaries serve, by binary, read
// through each one's server reflection, and fails the test unless every
// service declared in proto/ (and health and reflection) is among them.
func (f *fleet) served(ctx context.Context, t *testing.T) map[*system.Proc]map[string]*grpc.StreamDesc {
	t.Helper()
	out := map[*system.Proc]map[string]*grpc.StreamDesc{}
	var all []string
	for _, p := range []*system.Proc{f.actuator, f.decider, f.collector} {
		svcs, err := servertest.Listed(ctx, f.dial(t, "reader", p))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if out[p], err = servertest.Methods(svcs); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		all = append(all, svcs...)
	}
	missing, err := servertest.Unserved(filepath.Join("..", "..", "proto"), all)
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range missing {
		t.Errorf("service %s is served by none of the binaries the test runs: start them so that it is, and the matrix tries its methods", svc)
	}
	return out
}

// TestSecurity runs the three binaries with a certificate each and mutual
// TLS, then proves: the loop works across the services' own identities;
// every caller gets past exactly the methods the matrix allows it and
// PERMISSION_DENIED on all others; grpcurl with a reader's certificate can
// list and read but not scale.
func TestSecurity(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("loop over mTLS", func(t *testing.T) {
		target := &commonv1.TargetRef{Namespace: "default", Name: "hello"}
		push := collectorv1.NewCollectorServiceClient(f.dial(t, "pusher", f.collector))
		get := actuatorv1.NewActuatorServiceClient(f.dial(t, "reader", f.actuator))
		var last error
		for ctx.Err() == nil {
			_, err := push.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
				Target: target, PodName: "activator-0", AverageConcurrency: 12, RequestCount: 12,
			}}})
			if err != nil {
				t.Fatalf("PushStats by the pusher: %v", err)
			}
			got, err := get.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: target})
			if err == nil && got.GetReplicas() >= 1 {
				return
			}
			last = err
			time.Sleep(300 * time.Millisecond)
		}
		t.Fatalf("the actuator never scaled %s: collector → decider → actuator did not pass (last GetScale: %v)", target.Key(), last)
	})

	// KEDA's certificate reads the loop's target through the collector's
	// external scaler (the collector asks the decider over its own mutual
	// TLS); a reader's is refused.
	t.Run("keda", func(t *testing.T) {
		so := &externalscaler.ScaledObjectRef{Name: "hello", Namespace: "default", ScalerMetadata: map[string]string{"function": "hello"}}
		m, err := externalscaler.NewExternalScalerClient(f.dial(t, "keda", f.collector)).GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: so})
		if err != nil || len(m.GetMetricValues()) != 1 || m.GetMetricValues()[0].GetMetricValue() < 1 {
			t.Errorf("GetMetrics with KEDA's certificate: %v, %v; want the decider's desired replicas, at least 1", m, err)
		}
		_, err = externalscaler.NewExternalScalerClient(f.dial(t, "reader", f.collector)).GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: so})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("GetMetrics with a reader's certificate: %v, want PERMISSION_DENIED", err)
		}
	})

	// Every caller calls every method each binary serves, with a request
	// naming a namespace of its own (team-a for an unbound caller) and one
	// naming kube-system: it gets past the check exactly when the matrix
	// lets it call the method and the request names only namespaces it
	// may reach; a refusal is PERMISSION_DENIED naming the method, the
	// caller and, for a namespace, the namespace.
	t.Run("matrix", func(t *testing.T) {
		served := f.served(ctx, t)
		for _, p := range []*system.Proc{f.actuator, f.decider, f.collector} {
			for m := range served[p] {
				if _, ok := allowed[m]; !ok {
					t.Errorf("%s, served by the %s, is in no row of the matrix: decide who may call it", m, p.Name)
				}
			}
		}
		for m := range allowed {
			if !slices.ContainsFunc([]*system.Proc{f.actuator, f.decider, f.collector}, func(p *system.Proc) bool { _, ok := served[p][m]; return ok }) {
				t.Errorf("the matrix's row %s is no method the binaries serve", m)
			}
		}
		for caller := range ids {
			t.Run(caller, func(t *testing.T) {
				t.Parallel()
				for _, p := range []*system.Proc{f.actuator, f.decider, f.collector} {
					conn := f.dial(t, caller, p)
					in := tenantA
					if nss := scoped[caller]; len(nss) > 0 {
						in = nss[0]
					}
					for method, desc := range served[p] {
						for _, ns := range []string{in, "kube-system"} {
							req, named, err := servertest.RequestIn(method, ns)
							if err != nil {
								t.Fatal(err)
							}
							role := slices.Contains(allowed[method], caller)
							outside := role && scoped[caller] != nil && ns != in && named
							cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
							err = servertest.Call(cctx, conn, method, desc, req)
							ccancel()
							code := status.Code(err)
							switch {
							case role && !outside && (guardRefused(err) || code == codes.Unauthenticated || code == codes.Unavailable || code == codes.ResourceExhausted):
								t.Errorf("%s by %s in %s on the %s: %v, want it let through", method, caller, ns, p.Name, err)
							case (!role || outside) && !guardRefused(err):
								t.Errorf("%s by %s in %s on the %s: %v, want PERMISSION_DENIED by the authorization check", method, caller, ns, p.Name, err)
							case (!role || outside) && !strings.Contains(err.Error(), method):
								t.Errorf("%s by %s in %s on the %s: refusal %q does not name the method", method, caller, ns, p.Name, err)
							case (!role || outside) && !ids[caller].IsZero() && !strings.Contains(err.Error(), ids[caller].String()):
								t.Errorf("%s by %s in %s on the %s: refusal %q does not name the caller", method, caller, ns, p.Name, err)
							case outside && !strings.Contains(err.Error(), `"kube-system"`):
								t.Errorf("%s by %s in %s on the %s: refusal %q does not name the namespace", method, caller, ns, p.Name, err)
							}
						}
					}
				}
			})
		}
	})

	t.Run("scale", func(t *testing.T) {
		req := &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "default", Name: "by-hand"}, DecisionSequence: 1, DesiredReplicas: 3, Reason: "security test"}
		if _, err := actuatorv1.NewActuatorServiceClient(f.dial(t, "decider", f.actuator)).Scale(ctx, req); err != nil {
			t.Errorf("Scale with the decider's certificate: %v, want OK", err)
		}
		_, err := actuatorv1.NewActuatorServiceClient(f.dial(t, "collector", f.actuator)).Scale(ctx, req)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), ids["collector"].String()) {
			t.Errorf("Scale with the collector's certificate: %v, want PERMISSION_DENIED naming %s", err, ids["collector"])
		}
		if !strings.Contains(f.actuator.LogTail(200), `"caller":"\"`+ids["collector"].String()) {
			t.Errorf("the actuator's log has no refusal naming the collector:\n%s", f.actuator.LogTail(20))
		}
	})

	t.Run("grpcurl", func(t *testing.T) {
		grpcurl, err := rel.GrpcurlBinary()
		if err != nil {
			t.Fatal(err)
		}
		files := pki.DirFiles(f.dirs["reader"])
		run := func(args ...string) (string, error) {
			base := []string{"-cacert", files.CA, "-cert", files.Cert, "-key", files.Key, "-servername", "localhost"}
			out, err := exec.CommandContext(ctx, grpcurl, append(base, args...)...).CombinedOutput()
			return string(out), err
		}
		if out, err := run(f.decider.GRPCAddr, "list"); err != nil || !strings.Contains(out, "tidal.decider.v1.DeciderService") {
			t.Errorf("grpcurl list as a reader: %v\n%s", err, out)
		}
		if out, err := run(f.decider.GRPCAddr, "tidal.decider.v1.DeciderService/ListDecisions"); err != nil {
			t.Errorf("grpcurl ListDecisions as a reader: %v\n%s", err, out)
		}
		out, err := run("-d", `{"target":{"namespace":"default","name":"x"},"decisionSequence":"1"}`, f.actuator.GRPCAddr, "tidal.actuator.v1.ActuatorService/Scale")
		if err == nil || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("grpcurl Scale as a reader: %v, want PermissionDenied\n%s", err, out)
		}
	})
}
