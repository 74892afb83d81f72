package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
	"github.com/tidalscale/tidal/proto/externalscaler"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
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
// release "tidal" in namespace "tidal"), a pusher and an operator the
// services are told of, an identity of the trust domain with no role, and
// certificates the CA signed without any SPIFFE ID or with an ID of
// another trust domain.
var ids = map[string]identity.ID{
	"collector": identity.MustNew(trustDomain, namespace, "tidal-collector"),
	"decider":   identity.MustNew(trustDomain, namespace, "tidal-decider"),
	"actuator":  identity.MustNew(trustDomain, namespace, "tidal-actuator"),
	"pusher":    identity.MustNew(trustDomain, "knative-serving", "activator"),
	"operator":  identity.MustNew(trustDomain, "ops", "oncall"),
	"keda":      identity.MustNew(trustDomain, "keda", "keda-operator"),
	"reader":    identity.MustNew(trustDomain, "default", "grpcurl"),
	"foreign":   identity.MustNew("other.example", namespace, "tidal-decider"),
	"anonymous": {},
}

// allowed is the matrix the issue asks for: which callers get past the
// check of each method. A method not listed is a read, open to every
// identity of the trust domain.
var allowed = map[string][]string{
	"/tidal.actuator.v1.ActuatorService/Scale":             {"decider", "actuator", "operator"},
	"/tidal.actuator.v1.ActuatorService/Deploy":            {"operator"},
	"/tidal.actuator.v1.ActuatorService/Undeploy":          {"operator"},
	"/tidal.actuator.v1.ActuatorService/Update":            {"operator"},
	"/tidal.decider.v1.DeciderService/Ingest":              {"collector"},
	"/tidal.collector.v1.CollectorService/PushStats":       {"pusher"},
	"/tidal.collector.v1.CollectorService/PushStatsStream": {"pusher"},
	"/externalscaler.ExternalScaler/IsActive":              {"keda", "operator"},
	"/externalscaler.ExternalScaler/StreamIsActive":        {"keda", "operator"},
	"/externalscaler.ExternalScaler/GetMetricSpec":         {"keda", "operator"},
	"/externalscaler.ExternalScaler/GetMetrics":            {"keda", "operator"},
	"/externalscaler.ExternalScaler/StreamMetricSpec":      {"keda", "operator"},
	// Collector replicas forward a KEDA trigger to the replica owning it.
	"/tidal.collector.v1.KEDATargetService/EnsureKEDATarget": {"collector"},
}

var readers = []string{"collector", "decider", "actuator", "pusher", "operator", "keda", "reader"}

func allows(method, caller string) bool {
	list, ok := allowed[method]
	if !ok {
		list = readers
	}
	for _, c := range list {
		if c == caller {
			return true
		}
	}
	return false
}

// fleet is the three services as processes, each with its own certificate,
// and a certificate directory per caller.
type fleet struct {
	dirs                         map[string]string
	collector, decider, actuator *system.Proc
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	ca, err := pki.NewCA("tidal security test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	f := &fleet{dirs: map[string]string{}}
	for name, id := range ids {
		leaf := pki.Leaf{ID: id, Validity: time.Hour, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
		if id.IsZero() {
			leaf.CommonName = "tidal.tidal.svc"
		}
		iss, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		f.dirs[name] = filepath.Join(root, name)
		if err := ca.WriteDir(f.dirs[name], iss); err != nil {
			t.Fatal(err)
		}
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(svc string, args ...string) *system.Proc {
		files := pki.DirFiles(f.dirs[svc])
		args = append(args,
			"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-file", files.CA,
			"--authz-pushers", ids["pusher"].String(), "--authz-operators", ids["operator"].String(), "--authz-keda", ids["keda"].String(),
			"--authz-readers", ids["reader"].String())
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
	f.collector = start("collector", "--discovery", "push", "--decider-addr", f.decider.GRPCAddr)
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

// call invokes method with an empty message, which every request type
// decodes from, and returns how the call ended: a stream that passed the
// check and runs on (a watch) ends with its deadline.
func call(ctx context.Context, conn *grpc.ClientConn, method string, desc *grpc.StreamDesc) error {
	if desc == nil {
		return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}
	s, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	if desc.ClientStreams {
		if err := s.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if err := s.RecvMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// methodsOf lists a service's methods with their stream shapes, and the
// health and reflection methods every binary serves.
func methodsOf(sd grpc.ServiceDesc) map[string]*grpc.StreamDesc {
	out := map[string]*grpc.StreamDesc{
		"/grpc.health.v1.Health/Check":                              nil,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {ServerStreams: true, ClientStreams: true},
	}
	for _, m := range sd.Methods {
		out["/"+sd.ServiceName+"/"+m.MethodName] = nil
	}
	for i := range sd.Streams {
		s := sd.Streams[i]
		out["/"+sd.ServiceName+"/"+s.StreamName] = &s
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

	t.Run("matrix", func(t *testing.T) {
		for _, served := range []struct {
			svc *system.Proc
			sd  grpc.ServiceDesc
		}{
			{f.actuator, actuatorv1.ActuatorService_ServiceDesc}, {f.decider, deciderv1.DeciderService_ServiceDesc},
			{f.collector, collectorv1.CollectorService_ServiceDesc}, {f.collector, externalscaler.ExternalScaler_ServiceDesc},
			{f.collector, collectorv1.KEDATargetService_ServiceDesc},
		} {
			svc, sd := served.svc, served.sd
			for caller := range ids {
				conn := f.dial(t, caller, svc)
				for method, desc := range methodsOf(sd) {
					cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
					err := call(cctx, conn, method, desc)
					ccancel()
					code := status.Code(err)
					if allows(method, caller) {
						if code == codes.PermissionDenied || code == codes.Unavailable || code == codes.ResourceExhausted {
							t.Errorf("%s by %s on the %s: %v, want it let through", method, caller, svc.Name, err)
						}
						continue
					}
					if code != codes.PermissionDenied || !strings.Contains(err.Error(), method) {
						t.Errorf("%s by %s on the %s: %v, want PERMISSION_DENIED naming the method", method, caller, svc.Name, err)
					}
				}
			}
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
