package activator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// start is the fixtures' clock: 300 ms into a second.
var start = time.Unix(1_800_000_000, 0).Add(300 * time.Millisecond)

// defaults is the flags' default Config with changes applied.
func defaults(t *testing.T, change func(*Config)) Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlagsWithPrefix("activator-", fs)
	c.Listen = "127.0.0.1:0"
	if change != nil {
		change(&c)
	}
	if err := c.Validate("activator-"); err != nil {
		t.Fatal(err)
	}
	return c
}

// replica is one collector's activator side: a real hub, the endpoint on
// loopback, and its ActivatorStatService on loopback gRPC.
type replica struct {
	hub     *dispatch.Hub
	metrics *Metrics
	reg     *prometheus.Registry
	srv     *Server
	url     string
	grpc    string
	now     atomic.Pointer[time.Time]
	// stop stops everything the replica runs and waits for it.
	stop func()
}

func (r *replica) clock() time.Time { return *r.now.Load() }

// startReplica starts a replica; owners nil means it owns everything, and
// peers (with owners) reach the other replicas.
func startReplica(t *testing.T, cfg Config, implicit bool, owners Owners, peers Peers) *replica {
	t.Helper()
	return startReplicaOn(t, cfg, implicit, owners, peers, dispatch.Config{Retention: time.Minute, HighWater: 1 << 20, MaxTargets: 100})
}

// startReplicaOn starts a replica whose hub is configured by hc, on the
// replica's clock.
func startReplicaOn(t *testing.T, cfg Config, implicit bool, owners Owners, peers Peers, hc dispatch.Config) *replica {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry()}
	r.now.Store(&start)
	log := zap.NewNop()
	hc.Now = r.clock
	r.hub = dispatch.New(hc, dispatch.NewMetrics(r.reg), log)
	r.metrics = NewMetrics(r.reg)
	local := HubRecorder{Hub: r.hub, Implicit: implicit, Wait: cfg.BacklogWait}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	var fwd *Forwarder
	if owners != nil {
		fwd = NewForwarder(cfg, peers, r.metrics, log)
		go func() { _ = fwd.Run(ctx); done <- struct{}{} }()
	} else {
		done <- struct{}{}
	}
	router := NewRouter(RevisionDeployment, owners, local, fwd, r.metrics, log)
	router.now = r.clock
	r.srv = New(cfg, router, r.metrics, log)
	r.srv.now = r.clock
	addr, err := r.srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	r.url = "ws://" + addr.String()
	go func() { _ = r.srv.Run(ctx); done <- struct{}{} }()

	gs := grpc.NewServer()
	collectorv1.RegisterActivatorStatServiceServer(gs, NewPeerService(owners, local, r.metrics, r.clock))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.grpc = ln.Addr().String()
	go func() { _ = gs.Serve(ln); done <- struct{}{} }()
	r.stop = sync.OnceFunc(func() {
		cancel()
		gs.Stop()
		for range 3 {
			<-done
		}
	})
	t.Cleanup(r.stop)
	return r
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, code, err := tryDial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v (status %d)", url, err, code)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tryDial dials url and returns the handshake's HTTP status.
func tryDial(url string, h http.Header) (*websocket.Conn, int, error) {
	c, resp, err := websocket.DefaultDialer.Dial(url, h)
	code := 0
	if resp != nil {
		code = resp.StatusCode
		_ = resp.Body.Close()
	}
	return c, code, err
}

// deployment is the target of revision name in namespace shop.
func deployment(name string) *commonv1.TargetRef {
	ref, _ := RevisionDeployment("shop", name)
	return ref
}

// waitSamples waits for the hub to hold n samples of ref.
func waitSamples(t *testing.T, hub *dispatch.Hub, ref *commonv1.TargetRef, n int) []*commonv1.MetricSample {
	t.Helper()
	var samples []*commonv1.MetricSample
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%d samples of %s", n, ref.Key()), func() bool {
		w, _ := hub.Get(ref)
		samples = w.Samples
		return len(samples) >= n
	})
	return samples
}

// closeOf reads until the server closes and returns the close error.
func closeOf(t *testing.T, c *websocket.Conn) *websocket.CloseError {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read: %v, want a close frame", err)
		}
		return ce
	}
}

func TestStatsReachTheHubAtTheirArrivalSecond(t *testing.T) {
	r := startReplica(t, defaults(t, nil), true, nil, nil)
	c := dial(t, r.url)
	frame := frameOf("shop", wireStat{pod: "activator-0", conc: 2.5, requests: 7, timestamp: 1}, "cart-00001", "pay-00001")
	if err := c.WriteMessage(websocket.BinaryMessage, frame); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cart-00001", "pay-00001"} {
		s := waitSamples(t, r.hub, deployment(name), 1)[0]
		if got, want := s.GetTime().AsTime(), start.Truncate(time.Second); !got.Equal(want) {
			t.Errorf("%s: time = %v, want the arrival second %v (the stat's own timestamp is ignored)", name, got, want)
		}
		if s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_PUSH || s.GetAverageConcurrency() != 2.5 || s.GetRequestCount() != 7 {
			t.Errorf("%s: sample = %v, want a pushed sample of concurrency 2.5 and 7 requests", name, s)
		}
	}
	if got := value(r.metrics.stats.WithLabelValues(outcomeRecorded)); got != 2 {
		t.Errorf("recorded = %v, want 2", got)
	}
}

func TestUnknownTargetsAreCountedNotCreated(t *testing.T) {
	r := startReplica(t, defaults(t, nil), false, nil, nil)
	c := dial(t, r.url)
	if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "a", conc: 1}, "cart-00001")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the unknown target counted", func() bool { return value(r.metrics.stats.WithLabelValues(outcomeUnknown)) == 1 })
	if _, ok := r.hub.Get(deployment("cart-00001")); ok {
		t.Error("an unknown target was created without --discovery=push")
	}
}

func TestPingsAreAnswered(t *testing.T) {
	r := startReplica(t, defaults(t, nil), true, nil, nil)
	c := dial(t, r.url)
	pong := make(chan string, 1)
	c.SetPongHandler(func(data string) error { pong <- data; return nil })
	go func() { _, _, _ = c.ReadMessage() }() // processes control frames
	if err := c.WriteControl(websocket.PingMessage, []byte("hello"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-pong:
		if got != "hello" {
			t.Errorf("pong = %q, want the ping's data", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pong within 5s")
	}
}

func TestHostileFramesCloseTheConnection(t *testing.T) {
	cfg := defaults(t, func(c *Config) { c.MaxFrameBytes = 1024; c.MaxMessages = 5; c.StatBurst = 5 })
	r := startReplica(t, cfg, true, nil, nil)
	tests := []struct {
		name   string
		typ    int
		frame  []byte
		code   int
		reason string // part of the close reason
		metric string
	}{
		{"oversized", websocket.BinaryMessage, make([]byte, 4096), websocket.CloseMessageTooBig, "", reasonTooBig},
		{"text", websocket.TextMessage, []byte(`{"namespace":"shop"}`), websocket.CloseUnsupportedData, "binary frames", reasonNotBinary},
		{"garbage", websocket.BinaryMessage, []byte("\xff\xff\xff\xff garbage"), websocket.ClosePolicyViolation, "not protobuf", reasonMalformed},
		{"too many messages", websocket.BinaryMessage, frameOf("shop", wireStat{pod: "a", conc: 1}, "a", "b", "c", "d", "e", "f"), websocket.ClosePolicyViolation, "more than 5 entries", reasonTooManyInOne},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, r.url)
			if err := c.WriteMessage(tt.typ, tt.frame); err != nil {
				t.Fatal(err)
			}
			ce := closeOf(t, c)
			if ce.Code != tt.code || !strings.Contains(ce.Text, tt.reason) {
				t.Errorf("close = %d %q, want %d with %q", ce.Code, ce.Text, tt.code, tt.reason)
			}
			// The server counts a frame too big after gorilla has sent the
			// close frame: the count may come just after it.
			testkit.Eventually(t, 5*time.Second, "the frame counted as "+tt.metric, func() bool { return value(r.metrics.frames.WithLabelValues(tt.metric)) == 1 })
			if got := value(r.metrics.frames.WithLabelValues(tt.metric)); got != 1 {
				t.Errorf("frames refused for %s = %v, want 1", tt.metric, got)
			}
		})
	}
	// The endpoint still serves.
	c := dial(t, r.url)
	if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "a", conc: 1}, "after-00001")); err != nil {
		t.Fatal(err)
	}
	waitSamples(t, r.hub, deployment("after-00001"), 1)
}

func TestRateBoundDropsFramesAndKeepsTheConnection(t *testing.T) {
	cfg := defaults(t, func(c *Config) { c.StatRate = 1; c.MaxMessages = 2; c.StatBurst = 2 })
	r := startReplica(t, cfg, true, nil, nil)
	c := dial(t, r.url)
	// The clock stands still, so the bucket never refills: the first frame
	// takes the burst, the second is dropped.
	for _, name := range []string{"first-00001", "second-00001"} {
		if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "a", conc: 1}, name, name+"-x")); err != nil {
			t.Fatal(err)
		}
	}
	waitSamples(t, r.hub, deployment("first-00001"), 1)
	testkit.Eventually(t, 5*time.Second, "the second frame counted as rate-limited", func() bool { return value(r.metrics.stats.WithLabelValues(outcomeRateLimited)) == 2 })
	if _, ok := r.hub.Get(deployment("second-00001")); ok {
		t.Error("a frame over the rate was recorded")
	}
	// A second later the connection may send again.
	later := start.Add(3 * time.Second)
	r.now.Store(&later)
	if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "a", conc: 1}, "third-00001")); err != nil {
		t.Fatal(err)
	}
	waitSamples(t, r.hub, deployment("third-00001"), 1)
}

func TestConnectionBounds(t *testing.T) {
	t.Run("at most max-connections", func(t *testing.T) {
		r := startReplica(t, defaults(t, func(c *Config) { c.MaxConnections = 1 }), true, nil, nil)
		dial(t, r.url)
		if _, code, err := tryDial(r.url, nil); err == nil || code != http.StatusServiceUnavailable {
			t.Fatalf("second connection: %v (status %d), want 503", err, code)
		}
		if got := value(r.metrics.refused.WithLabelValues(reasonConnLimit)); got != 1 {
			t.Errorf("refused for the limit = %v, want 1", got)
		}
	})
	t.Run("only from allowed networks", func(t *testing.T) {
		cfg := defaults(t, nil)
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		cfg.RegisterFlagsWithPrefix("activator-", fs)
		if err := fs.Parse([]string{"--activator-listen=127.0.0.1:0", "--activator-allowed-cidrs=10.0.0.0/8, fd00::/8"}); err != nil {
			t.Fatal(err)
		}
		r := startReplica(t, cfg, true, nil, nil)
		if _, code, err := tryDial(r.url, nil); err == nil || code != http.StatusForbidden {
			t.Fatalf("connection from loopback: %v (status %d), want 403", err, code)
		}
	})
	t.Run("not a websocket", func(t *testing.T) {
		r := startReplica(t, defaults(t, nil), true, nil, nil)
		resp, err := http.Get("http" + strings.TrimPrefix(r.url, "ws"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain GET: %d, want 400", resp.StatusCode)
		}
	})
	t.Run("no browser origins", func(t *testing.T) {
		r := startReplica(t, defaults(t, nil), true, nil, nil)
		if _, code, err := tryDial(r.url, http.Header{"Origin": {"http://evil.example"}}); err == nil || code != http.StatusForbidden {
			t.Fatalf("connection with an Origin: %v (status %d), want 403", err, code)
		}
	})
}

func TestShutdownAsksActivatorsToReconnect(t *testing.T) {
	cfg := defaults(t, nil)
	reg := prometheus.NewRegistry()
	hub := dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 20}, dispatch.NewMetrics(reg), zap.NewNop())
	m := NewMetrics(reg)
	srv := New(cfg, NewRouter(RevisionDeployment, nil, HubRecorder{Hub: hub, Implicit: true, Wait: time.Second}, nil, m, zap.NewNop()), m, zap.NewNop())
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c := dial(t, "ws://"+addr.String())
	testkit.Eventually(t, 5*time.Second, "the connection counted", func() bool { return value(m.connections) == 1 })
	cancel()
	if ce := closeOf(t, c); ce.Code != closeServiceRestart {
		t.Errorf("close = %d %q, want %d (service restart)", ce.Code, ce.Text, closeServiceRestart)
	}
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil on shutdown", err)
	}
	if got := value(m.connections); got != 0 {
		t.Errorf("connections after shutdown = %v, want 0", got)
	}
}

// grpcPeers is Peers over plain loopback gRPC.
type grpcPeers struct{ t *testing.T }

func (p grpcPeers) ForwardActivatorStats(ctx context.Context, addr string, req *collectorv1.ForwardActivatorStatsRequest) (*collectorv1.ForwardActivatorStatsResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return collectorv1.NewActivatorStatServiceClient(conn).ForwardActivatorStats(ctx, req)
}

// TestNonOwnerForwardsToTheOwner: an activator connected to replica a sends
// stats for revisions a owns and b owns; b's arrive in b's hub at a's
// arrival second, a's in a's, and neither replica holds the other's.
func TestNonOwnerForwardsToTheOwner(t *testing.T) {
	cfg := defaults(t, nil)
	var a, b *replica
	// Revisions named "b-..." belong to b.
	owners := func(self *replica) Owners {
		return func(ref *commonv1.TargetRef) (string, bool) {
			owner := a
			if strings.HasPrefix(ref.GetName(), "b-") {
				owner = b
			}
			return owner.grpc, owner == self
		}
	}
	var aOwners, bOwners Owners
	aOwners = func(ref *commonv1.TargetRef) (string, bool) { return owners(a)(ref) }
	bOwners = func(ref *commonv1.TargetRef) (string, bool) { return owners(b)(ref) }
	a = startReplica(t, cfg, true, aOwners, grpcPeers{t})
	b = startReplica(t, cfg, true, bOwners, grpcPeers{t})
	bNow := start.Add(700 * time.Millisecond) // b's clock is in the next second
	b.now.Store(&bNow)

	c := dial(t, a.url)
	if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "activator-0", conc: 3, requests: 4}, "a-00001", "b-00001")); err != nil {
		t.Fatal(err)
	}
	got := waitSamples(t, b.hub, deployment("b-00001"), 1)[0]
	if !got.GetTime().AsTime().Equal(start.Truncate(time.Second)) || got.GetAverageConcurrency() != 3 || got.GetRequestCount() != 4 {
		t.Errorf("b's sample = %v, want concurrency 3, 4 requests at a's arrival second %v", got, start.Truncate(time.Second))
	}
	waitSamples(t, a.hub, deployment("a-00001"), 1)
	if _, ok := a.hub.Get(deployment("b-00001")); ok {
		t.Error("the non-owner recorded the stat too")
	}
	if _, ok := b.hub.Get(deployment("a-00001")); ok {
		t.Error("the owner of b-00001 holds a-00001")
	}
	testkit.Eventually(t, 5*time.Second, "the forward counted", func() bool { return value(a.metrics.stats.WithLabelValues(outcomeForwarded)) == 1 })

	// A forward reaching a replica that no longer owns the target is
	// counted there and not forwarded again.
	resp, err := grpcPeers{t}.ForwardActivatorStats(context.Background(), b.grpc, &collectorv1.ForwardActivatorStatsRequest{
		ArrivalTime: nil, Stats: nil,
	})
	if err == nil {
		t.Errorf("an empty forward = %v, want refused", resp)
	}
	resp, err = grpcPeers{t}.ForwardActivatorStats(context.Background(), b.grpc, &collectorv1.ForwardActivatorStatsRequest{
		ArrivalTime: timestamppbNew(start), Stats: []*collectorv1.Stat{{Target: deployment("a-00002"), PodName: "activator-0", AverageConcurrency: 1}},
	})
	if err != nil || resp.GetNotOwned() != 1 || resp.GetRecorded() != 0 {
		t.Errorf("forward of a target b does not own = %v, %v; want 1 not owned", resp, err)
	}
	far := start.Add(-time.Hour)
	if _, err := (grpcPeers{t}).ForwardActivatorStats(context.Background(), b.grpc, &collectorv1.ForwardActivatorStatsRequest{
		ArrivalTime: timestamppbNew(far), Stats: []*collectorv1.Stat{{Target: deployment("b-00002"), PodName: "activator-0", AverageConcurrency: 1}},
	}); err == nil || !strings.Contains(err.Error(), "arrival_time") {
		t.Errorf("forward stamped an hour ago = %v, want refused naming arrival_time", err)
	}
}

func timestamppbNew(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}
