package knative

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/logging"
	rtesting "knative.dev/pkg/reconciler/testing"
	pkgwebsocket "knative.dev/pkg/websocket"
	"knative.dev/serving/pkg/activator"
	activatorhandler "knative.dev/serving/pkg/activator/handler"
	"knative.dev/serving/pkg/apis/serving"
	v1 "knative.dev/serving/pkg/apis/serving/v1"
	asmetrics "knative.dev/serving/pkg/autoscaler/metrics"
	fakerevisioninformer "knative.dev/serving/pkg/client/injection/informers/serving/v1/revision/fake"
)

// knativeActivator is Knative's activator reporting path, wired as
// cmd/activator/main.go (v0.50.0) wires it: a ConcurrencyReporter counting
// requests per revision sends StatMessages on a channel, ReportStats
// marshals them to WireStatMessages, and a durable websocket connection
// sends them to the autoscaler's address, pinging it.
type knativeActivator struct {
	ctx      context.Context
	conn     *pkgwebsocket.ManagedConnection
	statCh   chan []asmetrics.StatMessage
	handler  http.Handler
	revs     sync.Map // revisions added to the fake informer
	connects atomic.Int32
	drops    atomic.Int32
}

func startActivator(t *testing.T, url, podName string) *knativeActivator {
	t.Helper()
	ctx, _ := rtesting.SetupFakeContext(t)
	logger := logging.FromContext(ctx)
	a := &knativeActivator{ctx: ctx, statCh: make(chan []asmetrics.StatMessage)}
	mp := noop.NewMeterProvider()
	opts := append(activator.AutoscalerConnectionOptions(logger, mp), func(c *pkgwebsocket.ManagedConnection) {
		// Count connects and drops besides Knative's own callbacks.
		onConnect, onDisconnect := c.OnConnect, c.OnDisconnect
		c.OnConnect = func() { onConnect(); a.connects.Add(1) }
		c.OnDisconnect = func(err error) { onDisconnect(err); a.drops.Add(1) }
	})
	a.conn = pkgwebsocket.NewDurableSendingConnection(url, logger, opts...)
	reported := make(chan struct{})
	go func() { activator.ReportStats(logger, a.conn, a.statCh); close(reported) }()
	reporter := activatorhandler.NewConcurrencyReporter(ctx, podName, a.statCh, mp)
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() { reporter.Run(stop); close(ran) }()
	a.handler = reporter.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // held until the test lets go
	}))
	// Shutdown waits for the connection's blocked read, which ends only
	// when the server closes the connection or Knative's 10 s read
	// deadline passes: while the collector still runs, a cleanup takes
	// up to 10 s.
	t.Cleanup(func() {
		close(stop)
		<-ran
		close(a.statCh)
		<-reported
		_ = a.conn.Shutdown()
	})
	return a
}

// waitReady waits until the activator's connection is up: Knative's
// activator reports Ready only then (cmd/activator/main.go's health check
// returns statSink.Status()).
func (a *knativeActivator) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for a.conn.Status() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Knative's activator not connected after %v: %v", within, a.conn.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// request sends one request for namespace/name through the
// ConcurrencyReporter's handler and holds it until ctx ends.
func (a *knativeActivator) request(ctx context.Context, namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	rev := &v1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Labels: map[string]string{serving.ConfigurationLabelKey: name, serving.ServiceLabelKey: name}}}
	if _, loaded := a.revs.LoadOrStore(key, true); !loaded {
		_ = fakerevisioninformer.Get(a.ctx).Informer().GetIndexer().Add(rev)
	}
	req := httptest.NewRequestWithContext(activatorhandler.WithRevisionAndID(ctx, rev, key), http.MethodGet, "/", nil)
	a.handler.ServeHTTP(httptest.NewRecorder(), req)
}

// send hands stats to ReportStats as the reporter's tick does.
func (a *knativeActivator) send(sms ...asmetrics.StatMessage) { a.statCh <- sms }

func stat(namespace, name, pod string, concurrency, requests float64) asmetrics.StatMessage {
	return asmetrics.StatMessage{Key: types.NamespacedName{Namespace: namespace, Name: name},
		Stat: asmetrics.Stat{PodName: pod, AverageConcurrentRequests: concurrency, RequestCount: requests}}
}

func has(pred func(sample) bool) func([]sample) bool {
	return func(ss []sample) bool {
		for _, s := range ss {
			if pred(s) {
				return true
			}
		}
		return false
	}
}

// TestActivatorStatsReachTheStream: Knative's activator code connects to
// the collector binary, and what it reports reaches the collector's stream
// to its decider under the revision's Deployment, stamped with whole
// seconds: stats as the reporter's tick hands them over, the immediate
// concurrency-1 stat of a revision's first request, and the per-second
// reports while requests are in flight.
func TestActivatorStatsReachTheStream(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := startActivator(t, col.wsURL, "activator-test")
	a.waitReady(t, 10*time.Second)

	a.send(stat("shop", "cart-00001", "activator-test", 2.5, 7), stat("shop", "pay-00001", "activator-test", 0.5, 1))
	for _, tt := range []struct {
		key               string
		concurrency, reqs float64
	}{{"shop/cart-00001-deployment", 2.5, 7}, {"shop/pay-00001-deployment", 0.5, 1}} {
		got := dec.wait(t, tt.key, 10*time.Second, has(func(s sample) bool { return s.concurrency == tt.concurrency && s.requests == tt.reqs }))
		for _, s := range got {
			if s.time.Nanosecond() != 0 {
				t.Errorf("%s: sample time %v, want the arrival second", tt.key, s.time)
			}
		}
	}

	// Three requests held in flight for first-00001.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { a.request(ctx, "shop", "first-00001") })
	}
	const first = "shop/first-00001-deployment"
	dec.wait(t, first, 5*time.Second, has(func(s sample) bool { return s.concurrency == 1 && s.requests == 1 }))
	// A whole report period with the three in flight and no new request.
	dec.wait(t, first, 10*time.Second, has(func(s sample) bool { return s.concurrency > 2.99 && s.concurrency <= 3 && s.requests == 0 }))
	cancel()
	wg.Wait()
	if got := col.metric(t, statsTotal("recorded")); got < 4 {
		t.Errorf("recorded stats = %v, want at least 4", got)
	}
	if got := col.metric(t, "tidal_collector_activator_connections"); got != 1 {
		t.Errorf("connections = %v, want 1", got)
	}
}

// TestPingsKeepTheActivatorReady: Knative's connection pings every 3.3 s
// and drops the connection when no pong came for 10 s
// (knative.dev/pkg/websocket pongTimeout); 12 s connected without a drop
// means the collector answers them.
func TestPingsKeepTheActivatorReady(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := startActivator(t, col.wsURL, "activator-ping")
	a.waitReady(t, 10*time.Second)
	end := time.Now().Add(12 * time.Second)
	for time.Now().Before(end) {
		if err := a.conn.Status(); err != nil {
			t.Fatalf("Knative's activator lost its connection: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := a.drops.Load(); n != 0 {
		t.Errorf("connection dropped %d times in 12 s, want 0: pongs are not answered", n)
	}
}

// TestActivatorRedialsAfterARestart: a collector stopping closes the
// connection with 1012 (service restart), Knative's connection redials,
// and the restarted collector takes its stats.
func TestActivatorRedialsAfterARestart(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := startActivator(t, col.wsURL, "activator-restart")
	a.waitReady(t, 10*time.Second)
	if err := col.proc.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.drops.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Knative's activator did not see the collector go")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := col.proc.Start(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Knative's backoff starts at 100 ms and grows by 1.3 over 20 steps.
	a.waitReady(t, 30*time.Second)
	if n := a.connects.Load(); n < 2 {
		t.Errorf("connects = %d, want at least 2", n)
	}
	a.send(stat("shop", "again-00001", "activator-restart", 1, 1))
	dec.wait(t, "shop/again-00001-deployment", 10*time.Second, has(func(s sample) bool { return s.concurrency == 1 }))
}
