// Package knactivator runs Knative Serving v0.50.0's own activator reporting
// code inside a test process, wired as cmd/activator/main.go wires it: a
// ConcurrencyReporter counts requests per revision and hands StatMessages to
// ReportStats, which marshals them to WireStatMessages and sends them over
// knative.dev/pkg's durable websocket connection, pinging, to the autoscaler's
// address (tidal's collector in these tests). Its Revision informer is
// Knative's fake one (knative.dev/pkg/reconciler/testing). The activator's
// proxy (throttler, breaker, forwarding to pods) is not run: a request is
// held until its context ends, as one waiting for capacity would be.
package knactivator

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

// Activator is Knative's activator reporting path connected to one
// autoscaler address.
type Activator struct {
	// Conn is Knative's durable sending connection; Conn.Status() is nil
	// while it is connected, which is when Knative's activator reports
	// itself Ready (cmd/activator/main.go's health check).
	Conn *pkgwebsocket.ManagedConnection
	// Connects and Drops count the connection's connects and disconnects.
	Connects, Drops atomic.Int32

	ctx     context.Context
	statCh  chan []asmetrics.StatMessage
	handler http.Handler
	revs    sync.Map // revisions added to the fake informer
}

// Start connects Knative's activator code, reporting as podName, to the
// websocket url (ws://host:port) and stops it when t ends. Knative's
// Shutdown waits for the connection's blocked read, which ends when the
// server closes the connection or Knative's 10 s read deadline passes: while
// the collector still runs, the cleanup takes up to 10 s.
func Start(t testing.TB, url, podName string) *Activator {
	t.Helper()
	ctx, _ := rtesting.SetupFakeContext(t)
	logger := logging.FromContext(ctx)
	a := &Activator{ctx: ctx, statCh: make(chan []asmetrics.StatMessage)}
	mp := noop.NewMeterProvider()
	opts := append(activator.AutoscalerConnectionOptions(logger, mp), func(c *pkgwebsocket.ManagedConnection) {
		// Count connects and drops besides Knative's own callbacks.
		onConnect, onDisconnect := c.OnConnect, c.OnDisconnect
		c.OnConnect = func() { onConnect(); a.Connects.Add(1) }
		c.OnDisconnect = func(err error) { onDisconnect(err); a.Drops.Add(1) }
	})
	a.Conn = pkgwebsocket.NewDurableSendingConnection(url, logger, opts...)
	reported := make(chan struct{})
	go func() { activator.ReportStats(logger, a.Conn, a.statCh); close(reported) }()
	reporter := activatorhandler.NewConcurrencyReporter(ctx, podName, a.statCh, mp)
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() { reporter.Run(stop); close(ran) }()
	a.handler = reporter.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // held until the caller lets go
	}))
	t.Cleanup(func() {
		close(stop)
		<-ran
		close(a.statCh)
		<-reported
		_ = a.Conn.Shutdown()
	})
	return a
}

// WaitReady waits until the connection is up.
func (a *Activator) WaitReady(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for a.Conn.Status() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Knative's activator not connected after %v: %v", within, a.Conn.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Request counts one request for the revision namespace/name through the
// ConcurrencyReporter's handler and holds it until ctx ends. A revision's
// first request makes the reporter send a concurrency-1 stat at once.
func (a *Activator) Request(ctx context.Context, namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	rev := &v1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Labels: map[string]string{serving.ConfigurationLabelKey: name, serving.ServiceLabelKey: name}}}
	if _, loaded := a.revs.LoadOrStore(key, true); !loaded {
		_ = fakerevisioninformer.Get(a.ctx).Informer().GetIndexer().Add(rev)
	}
	req := httptest.NewRequestWithContext(activatorhandler.WithRevisionAndID(ctx, rev, key), http.MethodGet, "/", nil)
	a.handler.ServeHTTP(httptest.NewRecorder(), req)
}

// Send hands stats to ReportStats as the reporter's tick does.
func (a *Activator) Send(sms ...asmetrics.StatMessage) { a.statCh <- sms }

// Handler is the activator's HTTP front as cmd/activator/main.go stacks it,
// trimmed to what tests use: Knative's ProbeHandler answers network probes
// (K-Network-Probe: activator gets 200 "activator", as tidal's actuator
// expects before scaling to zero); any other request names its revision in
// Knative-Serving-Namespace and Knative-Serving-Revision (which Knative's
// context handler reads) and is counted and held as Request holds it.
func (a *Activator) Handler() http.Handler {
	return &activatorhandler.ProbeHandler{NextHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.Header.Get(activator.RevisionHeaderNamespace), r.Header.Get(activator.RevisionHeaderName)
		if ns == "" || name == "" {
			http.Error(w, "no revision headers", http.StatusBadRequest)
			return
		}
		a.Request(r.Context(), ns, name)
	})}
}

// Stat is a StatMessage as the reporter builds them.
func Stat(namespace, name, pod string, concurrency, requests float64) asmetrics.StatMessage {
	return asmetrics.StatMessage{Key: types.NamespacedName{Namespace: namespace, Name: name},
		Stat: asmetrics.Stat{PodName: pod, AverageConcurrentRequests: concurrency, RequestCount: requests}}
}
