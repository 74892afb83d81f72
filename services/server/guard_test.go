package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
	"github.com/tidalscale/tidal/proto/externalscaler"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/services/server/servertest"
	"github.com/tidalscale/tidal/test/testkit"
)

// testPKI is a CA and one certificate directory per caller of the matrix,
// plus a certificate from another CA.
type testPKI struct {
	dirs map[string]string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("tidal test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := &testPKI{dirs: map[string]string{}}
	for _, c := range callers {
		leaf := pki.Leaf{ID: c.id, Validity: time.Hour, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
		if c.id.IsZero() {
			leaf.CommonName = "tidal.tidal.svc"
		}
		iss, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, strings.ReplaceAll(c.name, " ", "-"))
		if err := ca.WriteDir(dir, iss); err != nil {
			t.Fatal(err)
		}
		p.dirs[c.name] = dir
	}
	other, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := other.Issue(pki.Leaf{ID: idDecider, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p.dirs["another CA"] = filepath.Join(root, "another-ca")
	if err := other.WriteDir(p.dirs["another CA"], iss); err != nil {
		t.Fatal(err)
	}
	return p
}

// config is a server Config presenting caller's certificate, with the
// matrix's pusher and operator.
func (p *testPKI) config(t *testing.T, caller string, args ...string) Config {
	t.Helper()
	f := pki.DirFiles(p.dirs[caller])
	return Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: time.Second, LogLevel: "info",
		TLS:   TLSConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA},
		Authz: *testAuthz(t, args...),
	}
}

// fakeActuator answers Scale; fakeDecider's WatchDecisions blocks until
// its caller leaves, counting open watches.
type fakeActuator struct {
	actuatorv1.UnimplementedActuatorServiceServer
}

func (fakeActuator) Scale(context.Context, *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	return &actuatorv1.ScaleResponse{}, nil
}

type fakeDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
	watching, entered atomic.Int32
	// caller is what Caller said of the last watcher.
	caller atomic.Pointer[string]
}

func (d *fakeDecider) WatchDecisions(_ *deciderv1.WatchDecisionsRequest, s grpc.ServerStreamingServer[deciderv1.WatchDecisionsResponse]) error {
	c := Caller(s.Context())
	d.caller.Store(&c)
	d.entered.Add(1)
	d.watching.Add(1)
	defer d.watching.Add(-1)
	// A first message tells the caller it got through.
	if err := s.Send(&deciderv1.WatchDecisionsResponse{}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// registerAll registers on srv every service tidal's binaries serve (New
// adds health and reflection), with fakes behind them.
func registerAll(srv *Server) *fakeDecider {
	dec := &fakeDecider{}
	actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), fakeActuator{})
	deciderv1.RegisterDeciderServiceServer(srv.GRPC(), dec)
	collectorv1.RegisterCollectorServiceServer(srv.GRPC(), collectorv1.UnimplementedCollectorServiceServer{})
	externalscaler.RegisterExternalScalerServer(srv.GRPC(), externalscaler.UnimplementedExternalScalerServer{})
	collectorv1.RegisterKEDATargetServiceServer(srv.GRPC(), collectorv1.UnimplementedKEDATargetServiceServer{})
	collectorv1.RegisterActivatorStatServiceServer(srv.GRPC(), collectorv1.UnimplementedActivatorStatServiceServer{})
	return dec
}

// startServer runs a server holding every service of tidal's binaries, as
// the actuator.
func startServer(t *testing.T, cfg Config, log *zap.Logger, reg *prometheus.Registry) (string, *fakeDecider) {
	t.Helper()
	srv := New(cfg, log, reg)
	dec := registerAll(srv)
	gaddr, _, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv.SetReady(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return gaddr.String(), dec
}

// dialAs connects to the actuator-identified server at addr with caller's
// certificate, pinning the server's identity as tidal's services do.
func (p *testPKI) dialAs(t *testing.T, caller, addr string) *grpc.ClientConn {
	t.Helper()
	cfg := p.config(t, caller)
	opt, err := cfg.DialOption(RoleActuator)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// call invokes method with an empty message (every request type decodes
// from it) and returns the status the server ended the call with.
func call(ctx context.Context, conn *grpc.ClientConn, method string, desc *grpc.StreamDesc) error {
	return servertest.Call(ctx, conn, method, desc, &emptypb.Empty{})
}

// requestIn is a request of method whose every namespace is ns
// (servertest.RequestIn).
func requestIn(t *testing.T, method, ns string) proto.Message {
	t.Helper()
	msg, _, err := servertest.RequestIn(method, ns)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// namesNamespace says whether method's request has a field naming a
// namespace that the scope check reads, so that a namespace-bound caller's
// request can fall outside its namespaces.
func namesNamespace(t *testing.T, method string) bool {
	t.Helper()
	_, found := firstOutOfScope(requestIn(t, method, "kube-system"), map[string]bool{})
	return found
}

// methods lists every method a server with registerAll's services serves,
// with its stream shape, from the registered service descriptors: a method
// added to a service is in the matrix without anyone listing it.
func methods(t *testing.T) map[string]*grpc.StreamDesc {
	t.Helper()
	srv := New(Config{}, zap.NewNop(), prometheus.NewRegistry())
	registerAll(srv)
	out, err := servertest.Methods(servertest.Served(srv.GRPC()))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMatrixCoversEveryMethod: every method of every service declared in
// proto/, and of health and reflection, is served by the matrix's server
// and has a row of wantAllowed; every row is a method served. A new method
// or service without a policy fails here, and TestAuthzOverTLS then tries
// it with every identity.
func TestMatrixCoversEveryMethod(t *testing.T) {
	srv := New(Config{}, zap.NewNop(), prometheus.NewRegistry())
	registerAll(srv)
	missing, err := servertest.Unserved(filepath.Join("..", "..", "proto"), servertest.Served(srv.GRPC()))
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range missing {
		t.Errorf("service %s is declared but registerAll does not serve it: add it, so the matrix tries its methods", svc)
	}
	served := methods(t)
	for m := range served {
		if _, ok := wantAllowed[m]; !ok {
			t.Errorf("%s is in no row of the authorization matrix: decide who may call it", m)
		}
	}
	for m := range wantAllowed {
		if _, ok := served[m]; !ok {
			t.Errorf("the matrix's row %s is no method served", m)
		}
	}
}

// TestAuthzOverTLS runs the whole matrix over real gRPC with mutual TLS on
// loopback: every caller calls every method, and is let through exactly
// when the matrix allows it. A refusal is PERMISSION_DENIED naming the
// method and the caller, logged and counted by role.
func TestAuthzOverTLS(t *testing.T) {
	p := newTestPKI(t)
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, p.config(t, "actuator"), zap.New(core), reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Every caller calls every method with a request naming a namespace
	// of its own (team-a for an unbound caller) and with one naming
	// kube-system: it passes exactly when the matrix lets it call the
	// method and the request names only namespaces it may reach.
	for _, c := range callers {
		conn := p.dialAs(t, c.name, addr)
		in := "team-a"
		if nss := scoped[c.name]; len(nss) > 0 {
			in = nss[0]
		}
		for method, desc := range methods(t) {
			for _, ns := range []string{in, "kube-system"} {
				role := contains(wantAllowed[method], c.name)
				bound := role && scoped[c.name] != nil && ns != in && namesNamespace(t, method)
				want := role && !bound
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				err := servertest.Call(cctx, conn, method, desc, requestIn(t, method, ns))
				ccancel()
				code := status.Code(err)
				switch {
				case want && (code == codes.PermissionDenied || code == codes.Unauthenticated || code == codes.Unavailable || code == codes.ResourceExhausted):
					t.Errorf("%s by %s in %s: %v, want it let through", method, c.name, ns, err)
				case !want && code != codes.PermissionDenied:
					t.Errorf("%s by %s in %s: %v, want PERMISSION_DENIED", method, c.name, ns, err)
				case !want && !strings.Contains(err.Error(), method):
					t.Errorf("%s by %s in %s: refusal %q does not name the method", method, c.name, ns, err)
				case !want && !c.id.IsZero() && !strings.Contains(err.Error(), c.id.String()):
					t.Errorf("%s by %s in %s: refusal %q does not name the caller", method, c.name, ns, err)
				case !want && bound && !strings.Contains(err.Error(), `"kube-system"`):
					t.Errorf("%s by %s in %s: refusal %q does not name the namespace", method, c.name, ns, err)
				}
			}
		}
	}

	// The decider's Scale succeeds; the collector's is refused.
	scale := &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "default", Name: "hello"}, DecisionSequence: 1, DesiredReplicas: 2}
	if _, err := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "decider", addr)).Scale(ctx, scale); err != nil {
		t.Errorf("Scale by the decider: %v, want OK", err)
	}
	_, err := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "collector", addr)).Scale(ctx, scale)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), idCollector.String()) {
		t.Errorf("Scale by the collector: %v, want PERMISSION_DENIED naming %s", err, idCollector)
	}
	if got := refusals(t, reg, "/tidal.actuator.v1.ActuatorService/Scale", "collector", "permission_denied"); got != 3 {
		t.Errorf("refusals of Scale counted for role collector = %v, want 3 (matrix twice and this call)", got)
	}
	if got := refusals(t, reg, "/tidal.decider.v1.DeciderService/Ingest", "unknown", "permission_denied"); got != 4 {
		t.Errorf("refusals of Ingest counted for role unknown = %v, want 4 (foreign and no identity, twice)", got)
	}
	if got := refusals(t, reg, "/tidal.decider.v1.DeciderService/ListDecisions", "operator", "namespace"); got != 1 {
		t.Errorf("refusals of ListDecisions counted for role operator, reason namespace = %v, want 1 (the tenant operator in kube-system)", got)
	}
	logged := logs.FilterMessageSnippet("call refused").FilterField(zap.String("caller", identity.Quote(idCollector.String()))).All()
	if len(logged) == 0 {
		t.Errorf("no log line of the collector's refusal; have %d lines", logs.Len())
	} else if f := logged[0].ContextMap(); f["method"] == "" || f["role"] != "collector" || f["reason"] == "" {
		t.Errorf("refusal logged with fields %v, want method, role and reason", f)
	}

	// A client whose certificate another CA signed never gets through the
	// handshake.
	if err := call(ctx, p.dialAs(t, "another CA", addr), "/grpc.health.v1.Health/Check", nil); status.Code(err) != codes.Unavailable {
		t.Errorf("Check with a certificate of another CA: %v, want the handshake refused", err)
	}
}

// refusals is the value of tidal_grpc_refused_total{method, role, reason}.
func refusals(t *testing.T, reg *prometheus.Registry, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tidal_grpc_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["method"] == labels[0] && got["role"] == labels[1] && got["reason"] == labels[2] {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no tidal_grpc_refused_total%v", labels)
	return 0
}

// TestDialPinsServerIdentity: a client calling an actuator refuses a
// server whose certificate is not an actuator's, though the CA signed it.
func TestDialPinsServerIdentity(t *testing.T) {
	p := newTestPKI(t)
	addr, _ := startServer(t, p.config(t, "collector"), zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := call(ctx, p.dialAs(t, "decider", addr), "/grpc.health.v1.Health/Check", nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is not a actuator identity") {
		t.Errorf("decider dialling a collector as its actuator: %v, want the handshake refused for the server's identity", err)
	}
	cfg := p.config(t, "decider")
	opt, err := cfg.DialOption(RoleCollector)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := call(ctx, conn, "/grpc.health.v1.Health/Check", nil); err != nil {
		t.Errorf("dialling the collector as a collector: %v", err)
	}
}

func TestMutatingRateLimit(t *testing.T) {
	p := newTestPKI(t)
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, p.config(t, "actuator", "--authz-mutating-rate", "0.001", "--authz-mutating-burst", "3"), zap.NewNop(), reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	scale := &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "default", Name: "hello"}, DecisionSequence: 1}
	dec := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "decider", addr))
	for i := range 3 {
		if _, err := dec.Scale(ctx, scale); err != nil {
			t.Fatalf("Scale %d within the burst: %v", i+1, err)
		}
	}
	_, err := dec.Scale(ctx, scale)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), idDecider.String()) {
		t.Errorf("Scale over the rate: %v, want RESOURCE_EXHAUSTED naming the decider", err)
	}
	// Reads are not limited, and the bucket is the decider's alone.
	if _, err := dec.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: scale.Target}); status.Code(err) != codes.Unimplemented {
		t.Errorf("GetScale by the rate-limited decider: %v, want it through to the handler", err)
	}
	if _, err := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "operator", addr)).Scale(ctx, scale); err != nil {
		t.Errorf("Scale by the operator: %v, want OK (its own bucket)", err)
	}
	if got := refusals(t, reg, "/tidal.actuator.v1.ActuatorService/Scale", "decider", "rate_limited"); got != 1 {
		t.Errorf("rate-limited Scale calls counted = %v, want 1", got)
	}
}

// TestMaxConcurrentStreams: a connection holds at most the configured
// calls open; the next waits in the client until one ends.
func TestMaxConcurrentStreams(t *testing.T) {
	p := newTestPKI(t)
	cfg := p.config(t, "actuator")
	cfg.MaxConcurrentStreams = 2
	addr, dec := startServer(t, cfg, zap.NewNop(), prometheus.NewRegistry())
	conn := p.dialAs(t, "operator", addr)
	client := deciderv1.NewDeciderServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cancels []context.CancelFunc
	watch := func() {
		wctx, wcancel := context.WithCancel(ctx)
		cancels = append(cancels, wcancel)
		go func() { _, _ = client.WatchDecisions(wctx, &deciderv1.WatchDecisionsRequest{}) }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	waitEntered := func(n int32) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%d watches entered", n), func() bool { return dec.entered.Load() == n },
			func() string { return fmt.Sprintf("watches entered = %d, want %d", dec.entered.Load(), n) })
	}
	watch()
	watch()
	waitEntered(2)
	watch()
	time.Sleep(300 * time.Millisecond)
	if got := dec.watching.Load(); got != 2 {
		t.Fatalf("open watches = %d on one connection, want the bound 2", got)
	}
	// Ending one lets the waiting call in.
	cancels[0]()
	waitEntered(3)
}

func TestPlaintextWarns(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	New(Config{}, zap.New(core), prometheus.NewRegistry())
	if logs.FilterMessageSnippet("PLAINTEXT").Len() != 1 {
		t.Errorf("no loud warning for plaintext; logged %v", logs.All())
	}
}

// TestCallerIsTheAuthenticatedIdentity: handlers keep per-caller bounds by
// Caller, which under mutual TLS is the certificate's SPIFFE ID, so one
// identity cannot spread itself over many source addresses.
func TestCallerIsTheAuthenticatedIdentity(t *testing.T) {
	p := newTestPKI(t)
	addr, dec := startServer(t, p.config(t, "actuator"), zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := p.dialAs(t, "decider", addr).NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/tidal.decider.v1.DeciderService/WatchDecisions")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(&deciderv1.WatchDecisionsRequest{}); err != nil {
		t.Fatal(err)
	}
	for dec.entered.Load() == 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	got := dec.caller.Load()
	if got == nil || *got != idDecider.String() {
		t.Errorf("Caller in the handler = %v, want %s", got, idDecider)
	}
}

// TestReadRateLimit: reads have a budget per identity too, apart from the
// mutating one; tidal's own services read without one.
func TestReadRateLimit(t *testing.T) {
	p := newTestPKI(t)
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, p.config(t, "actuator", "--authz-read-rate", "0.001", "--authz-read-burst", "2"), zap.NewNop(), reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := &actuatorv1.GetScaleRequest{Target: &commonv1.TargetRef{Namespace: "team-a", Name: "web"}}
	reader := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "reader", addr))
	for i := range 2 {
		if _, err := reader.GetScale(ctx, get); status.Code(err) != codes.Unimplemented {
			t.Fatalf("GetScale %d within the burst: %v, want it through to the handler", i+1, err)
		}
	}
	_, err := reader.GetScale(ctx, get)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "reads") || !strings.Contains(err.Error(), idReader.String()) {
		t.Errorf("GetScale over the read rate: %v, want RESOURCE_EXHAUSTED naming the reader and its reads", err)
	}
	// Its mutating budget is another: the operator's reads and Scale.
	op := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "operator", addr))
	for range 2 {
		_, _ = op.GetScale(ctx, get)
	}
	if _, err := op.Scale(ctx, &actuatorv1.ScaleRequest{Target: get.Target, DecisionSequence: 1}); err != nil {
		t.Errorf("Scale by an operator out of reads: %v, want OK", err)
	}
	dec := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "decider", addr))
	for i := range 10 {
		if _, err := dec.GetScale(ctx, get); status.Code(err) != codes.Unimplemented {
			t.Fatalf("GetScale %d by the decider: %v, want no read budget for tidal's services", i+1, err)
		}
	}
	if got := refusals(t, reg, "/tidal.actuator.v1.ActuatorService/GetScale", "reader", "rate_limited"); got != 1 {
		t.Errorf("rate-limited reads counted = %v, want 1", got)
	}
}

// TestConnectionBounds: a server holds at most --max-connections; the
// next waits unaccepted until one closes. A connection without a call for
// --max-connection-idle is closed by the server.
func TestConnectionBounds(t *testing.T) {
	p := newTestPKI(t)
	cfg := p.config(t, "actuator")
	cfg.Conn = ConnConfig{MaxConnections: 2, HandshakeTimeout: time.Second, MaxIdle: time.Hour, KeepaliveTime: time.Hour, KeepaliveTimeout: time.Second, MinPingInterval: time.Second}
	addr, _ := startServer(t, cfg, zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(conn *grpc.ClientConn, within time.Duration) error {
		cctx, ccancel := context.WithTimeout(ctx, within)
		defer ccancel()
		return call(cctx, conn, "/grpc.health.v1.Health/Check", nil)
	}
	first, second := p.dialAs(t, "reader", addr), p.dialAs(t, "reader", addr)
	for _, c := range []*grpc.ClientConn{first, second} {
		if err := check(c, 10*time.Second); err != nil {
			t.Fatalf("a connection within the bound: %v", err)
		}
	}
	third := p.dialAs(t, "reader", addr)
	if err := check(third, 500*time.Millisecond); status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Unavailable {
		t.Fatalf("a third connection: %v, want it held unaccepted", err)
	}
	_ = first.Close()
	if err := check(third, 10*time.Second); err != nil {
		t.Errorf("the third connection after the first closed: %v, want it served", err)
	}

	cfg.Conn = ConnConfig{MaxIdle: 200 * time.Millisecond, KeepaliveTime: time.Hour, KeepaliveTimeout: time.Second, MinPingInterval: time.Second}
	addr, _ = startServer(t, cfg, zap.NewNop(), prometheus.NewRegistry())
	conn := p.dialAs(t, "reader", addr)
	if err := check(conn, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The server's GOAWAY moves the client's connection to IDLE.
	for st := conn.GetState(); st != connectivity.Idle; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("the idle connection stayed %s; want the server to close it after 200ms", st)
		}
	}
}

// TestNamespaceReadBudget: an identity bound to two tenants' namespaces
// floods reads about one; the flood is refused by the budget of that
// namespace before it spends the identity's own, so its reads about the
// other namespace, unary and watch, still pass. The identity's own budget
// still bounds reads about ever new namespaces; tidal's services have
// neither.
func TestNamespaceReadBudget(t *testing.T) {
	p := newTestPKI(t)
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, p.config(t, "actuator",
		"--authz-read-rate", "0.001", "--authz-read-burst", "10",
		"--authz-namespace-read-rate", "0.001", "--authz-namespace-read-burst", "3",
		"--authz-namespaces", idStranger.String()+"=team-a,team-b"), zap.NewNop(), reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shared := deciderv1.NewDeciderServiceClient(p.dialAs(t, "stranger", addr))
	list := func(c deciderv1.DeciderServiceClient, ns string) error {
		_, err := c.ListDecisions(ctx, &deciderv1.ListDecisionsRequest{Namespace: ns})
		if status.Code(err) == codes.Unimplemented {
			return nil // through to the fake decider
		}
		return err
	}
	for i := range 20 {
		err := list(shared, "team-a")
		if i < 3 {
			if err != nil {
				t.Fatalf("read %d about team-a within the namespace's burst: %v", i+1, err)
			}
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-namespace-read-rate") || !strings.Contains(err.Error(), `"team-a"`) {
			t.Fatalf("read %d about team-a: %v, want RESOURCE_EXHAUSTED naming --authz-namespace-read-rate and team-a", i+1, err)
		}
	}
	for i := range 2 {
		if err := list(shared, "team-b"); err != nil {
			t.Errorf("read %d about team-b after the flood about team-a: %v, want it through", i+1, err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if err := firstWatch(wctx, shared, "team-b"); err != nil {
		t.Errorf("a watch of team-b after the flood about team-a: %v, want it through", err)
	}
	if got := refusals(t, reg, "/tidal.decider.v1.DeciderService/ListDecisions", "other", "namespace_rate_limited"); got != 17 {
		t.Errorf("reads refused for their namespace = %v, want 17", got)
	}

	// Reads about ever new namespaces meet the identity's own budget.
	reader := deciderv1.NewDeciderServiceClient(p.dialAs(t, "reader", addr))
	var err error
	n := 0
	for ; n < 20 && err == nil; n++ {
		err = list(reader, fmt.Sprintf("ns-%d", n))
	}
	if n != 11 || status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-read-rate") {
		t.Errorf("reads about new namespaces: refused at read %d with %v; want RESOURCE_EXHAUSTED naming --authz-read-rate at read 11", n, err)
	}
	dec := deciderv1.NewDeciderServiceClient(p.dialAs(t, "decider", addr))
	for i := range 10 {
		if err := list(dec, "team-a"); err != nil {
			t.Fatalf("read %d by the decider: %v, want no budget for tidal's services", i+1, err)
		}
	}
}

// firstWatch opens a WatchDecisions stream of ns and waits for its first
// message (the fake decider sends one at once): nil means it got through.
// The stream stays open until ctx ends.
func firstWatch(ctx context.Context, c deciderv1.DeciderServiceClient, ns string) error {
	s, err := c.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: ns})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// TestNamespaceWatchBounds: watch streams are bounded per caller and
// namespace and per namespace across callers, so one tenant's identities
// cannot take every watch; another namespace's watchers, and tidal's own
// services, are not held back, and a closed watch frees its place.
func TestNamespaceWatchBounds(t *testing.T) {
	p := newTestPKI(t)
	reg := prometheus.NewRegistry()
	addr, dec := startServer(t, p.config(t, "actuator", "--authz-namespace-watches-per-caller", "2", "--authz-namespace-watches", "3"), zap.NewNop(), reg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := func(caller string) deciderv1.DeciderServiceClient {
		return deciderv1.NewDeciderServiceClient(p.dialAs(t, caller, addr))
	}
	tenant, tenantOp := client("tenant"), client("tenant operator")
	var first context.CancelFunc
	for i := range 3 {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		if i == 0 {
			first = wcancel
		}
		err := firstWatch(wctx, tenant, "team-a")
		switch {
		case i < 2 && err != nil:
			t.Fatalf("the tenant's watch %d of team-a: %v, want it through", i+1, err)
		case i == 2 && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-namespace-watches-per-caller")):
			t.Fatalf("the tenant's third watch of team-a: %v, want RESOURCE_EXHAUSTED naming --authz-namespace-watches-per-caller", err)
		}
	}
	if err := firstWatch(ctx, tenantOp, "team-a"); err != nil {
		t.Fatalf("the tenant operator's watch of team-a: %v, want it through (3 in team-a)", err)
	}
	err := firstWatch(ctx, tenantOp, "team-a")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-namespace-watches)") || !strings.Contains(err.Error(), `"team-a"`) {
		t.Fatalf("a fourth watch of team-a: %v, want RESOURCE_EXHAUSTED naming --authz-namespace-watches and team-a", err)
	}
	for _, w := range []struct {
		caller, ns string
	}{{"stranger", "default"}, {"reader", "team-b"}, {"reader", ""}, {"collector", "team-a"}, {"collector", "team-a"}, {"collector", "team-a"}} {
		if err := firstWatch(ctx, client(w.caller), w.ns); err != nil {
			t.Errorf("a watch of %q by %s while team-a is full: %v, want it through", w.ns, w.caller, err)
		}
	}
	if got := refusals(t, reg, "/tidal.decider.v1.DeciderService/WatchDecisions", "other", "watch_limited"); got != 1 {
		t.Errorf("the tenant's watches refused = %v, want 1", got)
	}
	if got := refusals(t, reg, "/tidal.decider.v1.DeciderService/WatchDecisions", "operator", "watch_limited"); got != 1 {
		t.Errorf("the tenant operator's watches refused = %v, want 1", got)
	}
	// Closing a watch of team-a frees its place.
	open := dec.watching.Load()
	first()
	testkit.Eventually(t, 10*time.Second, "the closed watch to end", func() bool { return dec.watching.Load() == open-1 })
	if err := firstWatch(ctx, tenantOp, "team-a"); err != nil {
		t.Errorf("a watch of team-a after one closed: %v, want it through", err)
	}
}

// TestNamespaceMutatingBudget: KEDA's one identity calls the external
// scaler for every tenant's ScaledObjects; one tenant's flood is refused by
// the budget of its namespace before it spends KEDA's own, so another
// namespace's calls and streams still pass. The identity's own budget
// still bounds calls about ever new namespaces; tidal's services have no
// budget per namespace.
func TestNamespaceMutatingBudget(t *testing.T) {
	p := newTestPKI(t)
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, p.config(t, "actuator",
		"--authz-mutating-rate", "0.001", "--authz-mutating-burst", "10",
		"--authz-namespace-mutating-rate", "0.001", "--authz-namespace-mutating-burst", "3"), zap.NewNop(), reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keda := externalscaler.NewExternalScalerClient(p.dialAs(t, "keda", addr))
	metrics := func(ns string) error {
		_, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Namespace: ns, Name: "so"}})
		if status.Code(err) == codes.Unimplemented {
			return nil // through to the handler
		}
		return err
	}
	for i := range 20 {
		err := metrics("team-a")
		switch {
		case i < 3 && err != nil:
			t.Fatalf("KEDA's call %d about team-a within the namespace's burst: %v", i+1, err)
		case i >= 3 && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-namespace-mutating-rate") || !strings.Contains(err.Error(), `"team-a"`)):
			t.Fatalf("KEDA's call %d about team-a: %v, want RESOURCE_EXHAUSTED naming --authz-namespace-mutating-rate and team-a", i+1, err)
		}
	}
	for i := range 2 {
		if err := metrics("team-b"); err != nil {
			t.Errorf("KEDA's call %d about team-b after the flood about team-a: %v, want it through", i+1, err)
		}
	}
	st, err := keda.StreamIsActive(ctx, &externalscaler.ScaledObjectRef{Namespace: "team-b", Name: "so"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("KEDA's stream about team-b after the flood about team-a: %v, want it through to the handler", err)
	}
	if got := refusals(t, reg, "/externalscaler.ExternalScaler/GetMetrics", "keda", "namespace_rate_limited"); got != 17 {
		t.Errorf("KEDA's calls refused for their namespace = %v, want 17", got)
	}
	// 6 of the identity's 10 are spent: calls about new namespaces meet
	// its own budget at the fifth.
	n := 0
	for err = nil; n < 10 && err == nil; n++ {
		err = metrics(fmt.Sprintf("ns-%d", n))
	}
	if n != 5 || status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--authz-mutating-rate") {
		t.Errorf("KEDA's calls about new namespaces: refused at call %d with %v; want RESOURCE_EXHAUSTED naming --authz-mutating-rate at call 5", n, err)
	}
	dec := actuatorv1.NewActuatorServiceClient(p.dialAs(t, "decider", addr))
	for i := range 5 {
		if _, err := dec.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "team-a", Name: "web"}, DecisionSequence: 1}); err != nil {
			t.Fatalf("the decider's Scale %d in team-a: %v, want no budget per namespace for tidal's services", i+1, err)
		}
	}
}
