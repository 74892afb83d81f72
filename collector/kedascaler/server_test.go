package kedascaler

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/proto/externalscaler"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// fakeTargets resolves follow triggers from a table; an object not in it
// does not exist.
type fakeTargets map[Follow]*commonv1.TargetRef

func (f fakeTargets) Target(fl Follow) (*commonv1.TargetRef, error) {
	if ref, ok := f[fl]; ok {
		return ref, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNoObject, fl)
}

// fakeDecisions answers Latest from a table of decisions and errors by
// target key, and hands out watches a test feeds.
type fakeDecisions struct {
	mu      sync.Mutex
	latest  map[string]*commonv1.Decision
	errs    map[string]error
	watches []*fakeWatch
	// watchErr fails every Watch.
	watchErr error
}

func newFakeDecisions() *fakeDecisions {
	return &fakeDecisions{latest: map[string]*commonv1.Decision{}, errs: map[string]error{}}
}

func (f *fakeDecisions) set(ref *commonv1.TargetRef, seq uint64, desired int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest[ref.Key()] = &commonv1.Decision{Target: ref, Sequence: seq, DesiredReplicas: desired}
	delete(f.errs, ref.Key())
}

func (f *fakeDecisions) fail(ref *commonv1.TargetRef, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[ref.Key()] = err
}

func (f *fakeDecisions) Latest(_ context.Context, ref *commonv1.TargetRef) (*commonv1.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs[ref.Key()]; err != nil {
		return nil, err
	}
	d, ok := f.latest[ref.Key()]
	if !ok {
		return nil, fmt.Errorf("%w: fake", ErrUnknownTarget)
	}
	if d.GetDesiredReplicas() < 0 {
		return nil, ErrNoDecision
	}
	return d, nil
}

func (f *fakeDecisions) Watch(ref *commonv1.TargetRef) (Watch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchErr != nil {
		return nil, f.watchErr
	}
	w := &fakeWatch{ref: ref, changed: make(chan struct{}, 1), closed: make(chan struct{})}
	f.watches = append(f.watches, w)
	return w, nil
}

// open returns the watches not closed.
func (f *fakeDecisions) open() []*fakeWatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeWatch
	for _, w := range f.watches {
		select {
		case <-w.closed:
		default:
			out = append(out, w)
		}
	}
	return out
}

type fakeWatch struct {
	ref     *commonv1.TargetRef
	changed chan struct{}
	mu      sync.Mutex
	dec     *commonv1.Decision
	once    sync.Once
	closed  chan struct{}
}

func (w *fakeWatch) push(seq uint64, desired int32) {
	w.mu.Lock()
	w.dec = &commonv1.Decision{Target: w.ref, Sequence: seq, DesiredReplicas: desired}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *fakeWatch) Changed() <-chan struct{} { return w.changed }

func (w *fakeWatch) Decision() *commonv1.Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dec
}

func (w *fakeWatch) Close() { w.once.Do(func() { close(w.closed) }) }

var (
	webPA   = Follow{KindPodAutoscaler, "shop", "web"}
	webRef  = &commonv1.TargetRef{Namespace: "shop", Name: "web-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}
	goneRef = &commonv1.TargetRef{Namespace: "shop", Name: "gone"}
)

func testConfig() Config {
	return Config{CallTimeout: time.Second, MaxStreams: 4, MaxStreamsPerCaller: 2, MaxStreamsPerNamespace: 4, CallRate: 1000, CallBurst: 1000, MaxWatches: 4, OwnerCheck: 10 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		TargetTTL: time.Minute, MaxTargets: 4, MaxPolls: 2, PollRate: 1000, PollBurst: 1000, ActivityReuse: time.Second, StreamPoll: 20 * time.Millisecond,
		Brokers: lag.BrokerPolicy{Patterns: lag.BrokerPatterns{"*"}}}
}

// callerOf names callers by the "caller" metadata key, as the identity
// would in the service.
func callerOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("caller"); len(v) > 0 {
		return v[0]
	}
	return "anonymous"
}

func newTestServer(t *testing.T) (*Server, *fakeDecisions, *prometheus.Registry) {
	t.Helper()
	dec := newFakeDecisions()
	targets := fakeTargets{
		webPA:                          webRef,
		{KindFunction, "shop", "gone"}: goneRef,
	}
	reg := prometheus.NewRegistry()
	return New(testConfig(), targets, dec, nil, callerOf, reg, zap.NewNop()), dec, reg
}

func ref(md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "so", Namespace: "shop", ScalerMetadata: md}
}

var followWeb = map[string]string{"podAutoscaler": "web", "scalerAddress": "tidal-collector.tidal.svc:9001"}

func TestUnaryAnswers(t *testing.T) {
	s, dec, _ := newTestServer(t)
	ctx := context.Background()
	for _, tt := range []struct {
		desired int32
		active  bool
	}{{0, false}, {1, true}, {7, true}} {
		dec.set(webRef, uint64(tt.desired)+1, tt.desired)
		act, err := s.IsActive(ctx, ref(followWeb))
		if err != nil || act.GetResult() != tt.active {
			t.Errorf("desired %d: IsActive = %v, %v; want %v", tt.desired, act, err, tt.active)
		}
		m, err := s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(followWeb), MetricName: webPA.MetricName()})
		if err != nil {
			t.Fatalf("desired %d: GetMetrics: %v", tt.desired, err)
		}
		if len(m.GetMetricValues()) != 1 {
			t.Fatalf("desired %d: GetMetrics = %v, want one value", tt.desired, m)
		}
		v := m.GetMetricValues()[0]
		if v.GetMetricName() != webPA.MetricName() || v.GetMetricValue() != int64(tt.desired) || v.GetMetricValueFloat() != float64(tt.desired) {
			t.Errorf("desired %d: metric %v", tt.desired, v)
		}
	}
	spec, err := s.GetMetricSpec(ctx, ref(followWeb))
	if err != nil {
		t.Fatal(err)
	}
	if ms := spec.GetMetricSpecs(); len(ms) != 1 || ms[0].GetMetricName() != "tidal-podautoscaler-shop-web" || ms[0].GetTargetSize() != 1 || ms[0].GetTargetSizeFloat() != 1 {
		t.Errorf("GetMetricSpec = %v, want one metric with target 1", spec)
	}
	// KEDA may send no metric name; the trigger has one metric.
	if _, err := s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(followWeb)}); err != nil {
		t.Errorf("GetMetrics without a metric name: %v", err)
	}
}

func TestUnaryErrors(t *testing.T) {
	s, dec, _ := newTestServer(t)
	dec.set(webRef, 1, 3)
	kafka := map[string]string{"bootstrapServers": "kafka:9092", "consumerGroup": "g", "lagThreshold": "5"}
	tests := []struct {
		name  string
		md    map[string]string
		setup func()
		code  codes.Code
		want  string
	}{
		{"no metadata", nil, nil, codes.InvalidArgument, "podAutoscaler"},
		{"bad metadata", map[string]string{"podAutoscaler": "web", "lagThreshold": "x"}, nil, codes.InvalidArgument, "lagThreshold"},
		{"inline Kafka on a collector that does not serve it", kafka, nil, codes.Unimplemented, "does not serve inline Kafka"},
		{"inline Kafka, invalid", map[string]string{"bootstrapServers": "kafka:9092", "consumerGroup": "g", "lagThreshold": "0"}, nil, codes.InvalidArgument, "lagThreshold"},
		{"no such PodAutoscaler", map[string]string{"podAutoscaler": "nope"}, nil, codes.NotFound, "PodAutoscaler shop/nope"},
		{"the decider holds no such target", map[string]string{"function": "gone"}, nil, codes.NotFound, "shop/gone"},
		{"no decision yet", followWeb, func() { dec.set(webRef, 1, -1) }, codes.Unavailable, "no decision yet"},
		{"decider unreachable", followWeb, func() {
			dec.fail(webRef, fmt.Errorf("%w: decider 10.0.0.1:9002: Unavailable: connection refused", ErrUnavailable))
		},
			codes.Unavailable, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec.set(webRef, 1, 3)
			if tt.setup != nil {
				tt.setup()
			}
			ctx := context.Background()
			check := func(rpc string, err error) {
				t.Helper()
				if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: %v, want %s containing %q", rpc, err, tt.code, tt.want)
				}
			}
			_, err := s.IsActive(ctx, ref(tt.md))
			check("IsActive", err)
			_, err = s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(tt.md)})
			check("GetMetrics", err)
			// GetMetricSpec asks no decider: only the metadata and the
			// object matter.
			_, err = s.GetMetricSpec(ctx, ref(tt.md))
			if tt.code == codes.InvalidArgument || tt.code == codes.Unimplemented || strings.Contains(tt.name, "PodAutoscaler") {
				check("GetMetricSpec", err)
			} else if err != nil {
				t.Errorf("GetMetricSpec: %v, want the spec", err)
			}
		})
	}
	t.Run("another metric's name", func(t *testing.T) {
		_, err := s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(followWeb), MetricName: "s0-other"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metricName") {
			t.Errorf("GetMetrics of another metric: %v, want INVALID_ARGUMENT naming metricName", err)
		}
	})
	t.Run("no ScaledObjectRef", func(t *testing.T) {
		_, err := s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("GetMetrics without a ScaledObjectRef: %v, want INVALID_ARGUMENT", err)
		}
	})
	t.Run("a PodAutoscaler without Kubernetes", func(t *testing.T) {
		push := New(testConfig(), PushTargets{}, dec, nil, callerOf, prometheus.NewRegistry(), zap.NewNop())
		_, err := push.IsActive(context.Background(), ref(followWeb))
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--discovery=push") {
			t.Errorf("IsActive: %v, want FAILED_PRECONDITION", err)
		}
		fnRef := &commonv1.TargetRef{Namespace: "shop", Name: "square", ApiVersion: "apps/v1", Kind: "Deployment"}
		dec.set(fnRef, 1, 2)
		if act, err := push.IsActive(context.Background(), ref(map[string]string{"function": "square"})); err != nil || !act.GetResult() {
			t.Errorf("IsActive of a Function without Kubernetes: %v, %v; want its Deployment's activity", act, err)
		}
	})
}

// serve runs s on a loopback listener and returns a client.
func serve(t *testing.T, s externalscaler.ExternalScalerServer) externalscaler.ExternalScalerClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return externalscaler.NewExternalScalerClient(conn)
}

// recvTimeout receives one message, failing the test after a few seconds.
func recvTimeout[T any](t *testing.T, recv func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := recv()
		c <- result{v, err}
	}()
	select {
	case r := <-c:
		return r.v, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	var zero T
	return zero, nil
}

func TestStreamIsActive(t *testing.T) {
	s, dec, reg := newTestServer(t)
	client := serve(t, s)
	dec.set(webRef, 10, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := client.StreamIsActive(ctx, ref(followWeb))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvTimeout(t, st.Recv)
	if err != nil || got.GetResult() {
		t.Fatalf("first message %v, %v; want the current activity, false", got, err)
	}
	testkit.Eventually(t, 5*time.Second, "the watch", func() bool { return len(dec.open()) == 1 })
	w := dec.open()[0]
	if w.ref.Key() != webRef.Key() {
		t.Fatalf("watching %s, want %s", w.ref.Key(), webRef.Key())
	}
	w.push(9, 5)  // older than what was sent: ignored
	w.push(11, 0) // no change: nothing sent
	w.push(12, 3) // activates: true at once
	got, err = recvTimeout(t, st.Recv)
	if err != nil || !got.GetResult() {
		t.Fatalf("after a decision of 3: %v, %v; want true", got, err)
	}
	w.push(13, 4) // still active: nothing
	w.push(14, 0)
	got, err = recvTimeout(t, st.Recv)
	if err != nil || got.GetResult() {
		t.Fatalf("after a decision of 0: %v, %v; want false", got, err)
	}
	if n := value(t, reg, "tidal_collector_keda_streams"); n != 1 {
		t.Errorf("streams gauge %v, want 1", n)
	}
	cancel()
	testkit.Eventually(t, 5*time.Second, "the watch to close when KEDA leaves", func() bool { return len(dec.open()) == 0 })
	testkit.Eventually(t, 5*time.Second, "the stream's place to be freed", func() bool {
		return value(t, reg, "tidal_collector_keda_streams") == 0
	})
}

// TestStreamIsActiveWaitsUntilKnown: while tidal cannot say (no decision
// yet, a target its decider has not heard of, a decider out of reach) the
// stream sends nothing and stays open; the first decision is sent at once.
func TestStreamIsActiveWaitsUntilKnown(t *testing.T) {
	s, dec, _ := newTestServer(t)
	client := serve(t, s)
	for _, tt := range []struct {
		name  string
		md    map[string]string
		setup func()
	}{
		{"no decision yet", followWeb, func() { dec.set(webRef, 1, -1) }},
		{"a target the decider has not heard of", map[string]string{"function": "gone"}, func() {}},
		{"a decider out of reach", followWeb, func() { dec.fail(webRef, ErrUnavailable) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := client.StreamIsActive(ctx, ref(tt.md))
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "the watch", func() bool { return len(dec.open()) == 1 })
			w := dec.open()[0]
			w.push(2, -1) // still not known: nothing sent, not "false"
			w.push(3, 1)
			got, err := recvTimeout(t, st.Recv)
			if err != nil || !got.GetResult() {
				t.Fatalf("first message %v, %v; want true from the first decision", got, err)
			}
			cancel()
			testkit.Eventually(t, 5*time.Second, "the watch to close", func() bool { return len(dec.open()) == 0 })
		})
	}
}

func TestStreamErrorsAndBounds(t *testing.T) {
	s, dec, reg := newTestServer(t)
	client := serve(t, s)
	dec.set(webRef, 1, 1)
	open := func(ctx context.Context, caller string, md map[string]string) (externalscaler.ExternalScaler_StreamIsActiveClient, error) {
		ctx = metadata.AppendToOutgoingContext(ctx, "caller", caller)
		st, err := client.StreamIsActive(ctx, ref(md))
		if err != nil {
			return nil, err
		}
		_, err = recvTimeout(t, st.Recv)
		return st, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tt := range []struct {
		name string
		md   map[string]string
		code codes.Code
	}{
		{"bad metadata", map[string]string{"podAutoscaler": "Web"}, codes.InvalidArgument},
		{"no such object", map[string]string{"podAutoscaler": "nope"}, codes.NotFound},
		{"inline Kafka", map[string]string{"bootstrapServers": "k:9092", "consumerGroup": "g"}, codes.Unimplemented},
	} {
		if _, err := open(ctx, "keda", tt.md); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
	// Two per caller, four in all (testConfig).
	for i, c := range []string{"keda", "keda"} {
		if _, err := open(ctx, c, followWeb); err != nil {
			t.Fatalf("stream %d of %s: %v", i, c, err)
		}
	}
	if _, err := open(ctx, "keda", followWeb); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third stream of one caller: %v, want RESOURCE_EXHAUSTED", err)
	}
	for i, c := range []string{"other", "other"} {
		if _, err := open(ctx, c, followWeb); err != nil {
			t.Fatalf("stream %d of %s: %v", i, c, err)
		}
	}
	if _, err := open(ctx, "third", followWeb); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fifth stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	const refused = "tidal_collector_keda_streams_refused_total"
	if value(t, reg, refused, "reason", "caller-limit") != 1 || value(t, reg, refused, "reason", "server-limit") != 1 {
		t.Errorf("refusals not counted by reason")
	}
	cancel()
	testkit.Eventually(t, 5*time.Second, "every stream to end", func() bool { return len(dec.open()) == 0 })

	// A watch the decisions refuse ends the stream with its code.
	dec.mu.Lock()
	dec.watchErr = fmt.Errorf("%w (at most 4)", ErrTooManyWatches)
	dec.mu.Unlock()
	if _, err := open(context.Background(), "keda", followWeb); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("with no room for a watch: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestStreamMetricSpec(t *testing.T) {
	s, _, reg := newTestServer(t)
	client := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := client.StreamMetricSpec(ctx, ref(followWeb))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvTimeout(t, st.Recv)
	if err != nil || len(got.GetMetricSpecs()) != 1 || got.GetMetricSpecs()[0].GetMetricName() != webPA.MetricName() {
		t.Fatalf("first message %v, %v; want the spec", got, err)
	}
	cancel()
	testkit.Eventually(t, 5*time.Second, "the stream's place to be freed", func() bool {
		return value(t, reg, "tidal_collector_keda_streams") == 0
	})
	st, err = client.StreamMetricSpec(context.Background(), ref(map[string]string{"bootstrapServers": "k:9092", "consumerGroup": "g"}))
	if err == nil {
		_, err = recvTimeout(t, st.Recv)
	}
	// KEDA falls back to GetMetricSpec on UNIMPLEMENTED.
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("StreamMetricSpec of inline Kafka: %v, want UNIMPLEMENTED", err)
	}
}

// value is the value of the gauge or counter name{label=value...}.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// TestNamespaceTenancy: KEDA calls for every tenant's ScaledObjects under
// one identity, so the scaler answers a ScaledObject only about its own
// namespace's targets, and keeps streams and calls per namespace: one
// tenant's ScaledObjects use up their own budget, never another's.
func TestNamespaceTenancy(t *testing.T) {
	dec := newFakeDecisions()
	booksRef := &commonv1.TargetRef{Namespace: "books", Name: "shelf", ApiVersion: "apps/v1", Kind: "Deployment"}
	targets := fakeTargets{webPA: webRef, {KindPodAutoscaler, "books", "shelf"}: booksRef}
	cfg := testConfig()
	cfg.MaxStreams, cfg.MaxStreamsPerCaller, cfg.MaxStreamsPerNamespace = 8, 8, 2
	reg := prometheus.NewRegistry()
	s := New(cfg, targets, dec, nil, callerOf, reg, zap.NewNop())
	client := serve(t, s)
	dec.set(webRef, 1, 1)
	dec.set(booksRef, 1, 2)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "caller", "keda"))
	defer cancel()
	in := func(ns string, md map[string]string) *externalscaler.ScaledObjectRef {
		return &externalscaler.ScaledObjectRef{Name: "so", Namespace: ns, ScalerMetadata: md}
	}
	shelf := map[string]string{"podAutoscaler": "shelf"}

	// A ScaledObject of shop may not follow books' PodAutoscaler, by any
	// call; books' own may.
	crossing := in("shop", map[string]string{"podAutoscaler": "shelf", "namespace": "books"})
	_, err := client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: crossing})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"books"`) || !strings.Contains(err.Error(), `"shop"`) {
		t.Errorf("GetMetrics of another namespace's PodAutoscaler: %v, want PERMISSION_DENIED naming both namespaces", err)
	}
	for name, call := range map[string]func() error{
		"IsActive":      func() error { _, err := client.IsActive(ctx, crossing); return err },
		"GetMetricSpec": func() error { _, err := client.GetMetricSpec(ctx, crossing); return err },
		"StreamIsActive": func() error {
			st, err := client.StreamIsActive(ctx, crossing)
			if err == nil {
				_, err = recvTimeout(t, st.Recv)
			}
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of another namespace's PodAutoscaler: %v, want PERMISSION_DENIED", name, err)
		}
	}
	m, err := client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: in("books", shelf)})
	if err != nil || m.GetMetricValues()[0].GetMetricValue() != 2 {
		t.Errorf("GetMetrics of books' own PodAutoscaler: %v, %v; want 2", m, err)
	}
	if v := value(t, reg, "tidal_collector_keda_streams_refused_total", "reason", "other-namespace"); v != 4 {
		t.Errorf("other-namespace refusals counted %v, want 4", v)
	}

	// Streams: shop holds its two, and a third is refused; books' streams
	// still open, under the same identity.
	open := func(ref *externalscaler.ScaledObjectRef) error {
		st, err := client.StreamIsActive(ctx, ref)
		if err != nil {
			return err
		}
		_, err = recvTimeout(t, st.Recv)
		return err
	}
	for i := range 2 {
		if err := open(in("shop", followWeb)); err != nil {
			t.Fatalf("shop's stream %d: %v", i, err)
		}
	}
	if err := open(in("shop", followWeb)); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--keda-max-streams-per-namespace") {
		t.Errorf("shop's third stream: %v, want RESOURCE_EXHAUSTED naming --keda-max-streams-per-namespace", err)
	}
	if err := open(in("books", shelf)); err != nil {
		t.Errorf("books' stream while shop is at its bound: %v, want it open", err)
	}
	cancel()
	testkit.Eventually(t, 5*time.Second, "every stream to end", func() bool { return len(dec.open()) == 0 })

	// Calls: shop's bucket empties, books' does not.
	cfg.CallRate, cfg.CallBurst = 0.001, 3
	s = New(cfg, targets, dec, nil, callerOf, prometheus.NewRegistry(), zap.NewNop())
	call := func(ns string, md map[string]string) error {
		_, err := s.IsActive(context.Background(), in(ns, md))
		return err
	}
	for i := range 3 {
		if err := call("shop", followWeb); err != nil {
			t.Fatalf("shop's call %d: %v", i, err)
		}
	}
	if err := call("shop", followWeb); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--keda-namespace-call-rate") {
		t.Errorf("shop's fourth call: %v, want RESOURCE_EXHAUSTED naming --keda-namespace-call-rate", err)
	}
	if err := call("books", shelf); err != nil {
		t.Errorf("books' call after shop's ran out: %v, want it answered", err)
	}
}
