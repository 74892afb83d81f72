package dispatch

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/gathered"
	"github.com/tidalscale/tidal/test/testkit"
)

func testConfig(t testing.TB) StreamsConfig {
	var c StreamsConfig
	c.RegisterFlagsWithPrefix("stream.", flag.NewFlagSet("t", flag.PanicOnError))
	c.CollectorID = "collector-test"
	c.MinBackoff = 10 * time.Millisecond
	c.MaxBackoff = 50 * time.Millisecond
	c.FlushInterval = 5 * time.Millisecond
	if err := c.Validate("stream."); err != nil {
		t.Fatal(err)
	}
	return c
}

type collector struct {
	hub     *Hub
	streams *Streams
	reg     *prometheus.Registry
}

func startCollector(t testing.TB, cfg StreamsConfig, retention time.Duration, deciders ...string) *collector {
	t.Helper()
	reg := prometheus.NewRegistry()
	hub := New(Config{Retention: retention, HighWater: cfg.HighWater, Batch: cfg.BatchSamples}, NewMetrics(reg), zap.NewNop())
	st := NewStreams(cfg, hub, testLogger(t))
	st.SetDeciders(deciders)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = st.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &collector{hub: hub, streams: st, reg: reg}
}

func ref(name string) *commonv1.TargetRef { return &commonv1.TargetRef{Namespace: "ns", Name: name} }

func spec(name string) *deciderv1.TargetSpec {
	return &deciderv1.TargetSpec{Target: ref(name), Strategy: commonv1.Strategy_STRATEGY_KPA}
}

func scrapeSample(at time.Time, c float64, ready int32) *commonv1.MetricSample {
	return &commonv1.MetricSample{Time: timestamppb.New(at), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: c, ReadyPods: &ready}
}

func pushSample(at time.Time, c float64) *commonv1.MetricSample {
	return &commonv1.MetricSample{Time: timestamppb.New(at.Truncate(time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_PUSH, AverageConcurrency: c}
}

// TestDeciderRestartReplaysHistory is the acceptance test of the stream: two
// collectors measure the same targets; one streams to a decider that never
// stops, the other to a decider that is stopped mid-stream, misses samples
// while down, and is restarted on the same address. After the restart the
// restarted decider holds exactly what the uninterrupted one holds over the
// retained span, so its next decision is the same.
func TestDeciderRestartReplaysHistory(t *testing.T) {
	const retention = 30 * time.Second
	steady := startDecider(t, "")
	restarted := startDecider(t, "")
	cfg := testConfig(t)
	a := startCollector(t, cfg, retention, steady.addr)
	b := startCollector(t, cfg, retention, restarted.addr)
	names := []string{"alpha", "beta", "gamma"}
	for _, c := range []*collector{a, b} {
		for _, n := range names {
			c.hub.SetSpec(spec(n), 0)
		}
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	second := 0
	feed := func(upto int) {
		for ; second < upto; second++ {
			at := t0.Add(time.Duration(second) * time.Second)
			for i, n := range names {
				s := scrapeSample(at.Add(500*time.Millisecond), float64(second*(i+1)), int32(i+1))
				a.hub.Record(ref(n), s)
				b.hub.Record(ref(n), scrapeSample(at.Add(500*time.Millisecond), float64(second*(i+1)), int32(i+1)))
				// Two activator stats in the same second: merged in history,
				// summed by the decider either way.
				for _, c := range []*collector{a, b} {
					c.hub.Record(ref(n), pushSample(at, 0.25))
					c.hub.Record(ref(n), pushSample(at, 0.5))
				}
			}
		}
	}
	caughtUp := func(d *fakeDecider) func() bool {
		return func() bool {
			for _, n := range names {
				secs, _, ok := d.window(ref(n).Key(), 0)
				if !ok || len(secs) == 0 || secs[len(secs)-1] != t0.Unix()+int64(second-1) {
					return false
				}
			}
			return true
		}
	}
	feed(20)
	testkit.Eventually(t, 10*time.Second, "both deciders to receive 20 s", caughtUp(steady))
	testkit.Eventually(t, 10*time.Second, "restarted decider to receive 20 s", caughtUp(restarted))

	// Stop the decider mid-stream; samples keep coming while it is down.
	restarted.stop()
	feed(45)
	restarted2 := startDecider(t, restarted.addr)
	testkit.Eventually(t, 10*time.Second, "the restarted decider to be replayed", caughtUp(restarted2))
	feed(50)
	testkit.Eventually(t, 10*time.Second, "steady decider to catch up", caughtUp(steady))
	testkit.Eventually(t, 10*time.Second, "restarted decider to catch up", caughtUp(restarted2))

	from := t0.Unix() + int64(second) - int64(retention/time.Second)
	for _, n := range names {
		ws, wv, _ := steady.window(ref(n).Key(), from)
		rs, rv, _ := restarted2.window(ref(n).Key(), from)
		if !slices.Equal(ws, rs) || !slices.Equal(wv, rv) {
			t.Errorf("%s over the retained span:\nuninterrupted %v %v\nrestarted     %v %v", n, ws, wv, rs, rv)
		}
		if len(rs) < int(retention/time.Second) {
			t.Errorf("%s: restarted decider holds %d seconds, want the %s retained", n, len(rs), retention)
		}
	}
	batches := restarted2.takeBatches()
	if len(batches) == 0 || !batches[0].GetReplay() || len(batches[0].GetSpecs()) != len(names) {
		t.Fatalf("first batch after the restart = %v, want a replay with every spec", batches[0])
	}
	for _, bt := range batches {
		if bt.GetCollectorId() != "collector-test" {
			t.Fatalf("batch collector id %q", bt.GetCollectorId())
		}
	}
	if got := gathered.Sum(t, b.reg, "tidal_collector_stream_replays_total", "connect"); got < 3 {
		t.Errorf("replays{cause=connect} = %v, want the 3 targets replayed on the new stream", got)
	}
}

func TestTargetsMoveBetweenDeciders(t *testing.T) {
	d1, d2 := startDecider(t, ""), startDecider(t, "")
	c := startCollector(t, testConfig(t), time.Minute, d1.addr, d2.addr)
	var names []string
	for i := range 30 {
		n := fmt.Sprintf("t%02d", i)
		names = append(names, n)
		c.hub.SetSpec(spec(n), 0)
	}
	now := time.Now().Truncate(time.Second)
	for i, n := range names {
		c.hub.Record(ref(n), scrapeSample(now.Add(-10*time.Second), float64(i), 1))
	}
	all := func(ds ...*fakeDecider) func() bool {
		return func() bool {
			var got []string
			for _, d := range ds {
				got = append(got, d.keys()...)
			}
			slices.Sort(got)
			return len(got) == len(names)
		}
	}
	testkit.Eventually(t, 10*time.Second, "every target on exactly one of two deciders", all(d1, d2))

	d3 := startDecider(t, "")
	c.streams.SetDeciders([]string{d1.addr, d2.addr, d3.addr})
	testkit.Eventually(t, 10*time.Second, "the third decider to take its share", func() bool { return len(d3.keys()) > 0 })
	testkit.Eventually(t, 10*time.Second, "every target on exactly one of three deciders", all(d1, d2, d3))
	for _, k := range d3.keys() {
		secs, vals, _ := d3.window(k, 0)
		if len(secs) != 1 {
			t.Errorf("moved target %s: decider 3 holds %v %v, want its replayed history", k, secs, vals)
		}
		for _, d := range []*fakeDecider{d1, d2} {
			if slices.Contains(d.keys(), k) {
				t.Errorf("moved target %s still held by %s", k, d.addr)
			}
		}
	}
	// Removing a decider moves its targets back.
	c.streams.SetDeciders([]string{d1.addr, d2.addr})
	testkit.Eventually(t, 10*time.Second, "targets back on two deciders", all(d1, d2))

	// A deleted target is removed from its decider.
	c.hub.Remove(ref(names[0]))
	testkit.Eventually(t, 10*time.Second, "the deleted target forgotten", func() bool {
		return !slices.Contains(append(d1.keys(), d2.keys()...), ref(names[0]).Key())
	})
}

func TestPushToTargetAtZeroIsSentAtOnce(t *testing.T) {
	d := startDecider(t, "")
	cfg := testConfig(t)
	cfg.FlushInterval = time.Hour // only urgent stats go out
	c := startCollector(t, cfg, time.Minute, d.addr)
	testkit.Eventually(t, 10*time.Second, "the stream to open", func() bool { return connected(c.hub, d.addr) })
	c.hub.SetSpec(spec("zero"), 0)
	c.hub.SetSpec(spec("busy"), 0)
	c.hub.SetReadyPods(ref("zero"), 0)
	c.hub.SetReadyPods(ref("busy"), 3)
	now := time.Now()
	c.hub.Record(ref("busy"), pushSample(now, 1))
	time.Sleep(50 * time.Millisecond)
	if b := d.takeBatches(); len(b) != 0 {
		t.Fatalf("a stat for a target with ready pods went out before the flush interval: %v", b)
	}
	c.hub.Record(ref("zero"), pushSample(now, 1))
	testkit.Eventually(t, 10*time.Second, "the poke", func() bool {
		_, vals, _ := d.window(ref("zero").Key(), 0)
		return len(vals) == 1 && vals[0] == 1
	})
}

func TestReconnectAfterDeciderComesUp(t *testing.T) {
	d := startDecider(t, "")
	addr := d.addr
	d.stop()
	c := startCollector(t, testConfig(t), time.Minute, addr)
	c.hub.SetSpec(spec("late"), 0)
	c.hub.Record(ref("late"), scrapeSample(time.Now(), 4, 1))
	time.Sleep(100 * time.Millisecond) // several failed attempts
	d2 := startDecider(t, addr)
	testkit.Eventually(t, 10*time.Second, "the history replayed once the decider is up", func() bool {
		_, vals, ok := d2.window(ref("late").Key(), 0)
		return ok && len(vals) == 1 && vals[0] == 4
	})
	if got := gathered.Sum(t, c.reg, "tidal_collector_stream_failures_total", ""); got < 1 {
		t.Errorf("stream failures = %v, want the failed attempts counted", got)
	}
}

func TestSlowDeciderOverflowsIntoReplay(t *testing.T) {
	d := startDecider(t, "")
	block := make(chan struct{})
	d.mu.Lock()
	d.block = block
	d.mu.Unlock()
	cfg := testConfig(t)
	cfg.BatchSamples = 10
	cfg.HighWater = 20
	c := startCollector(t, cfg, time.Hour, d.addr)
	c.hub.SetSpec(spec("hot"), 0)
	testkit.Eventually(t, 10*time.Second, "the stream to open", func() bool { w, _ := c.hub.pendingWork(d.addr); return w == 0 && connected(c.hub, d.addr) })
	t0 := time.Now().Add(-30 * time.Minute)
	// gRPC buffers some batches before Send blocks; record until the
	// outbox stays full.
	for i := range 20000 {
		c.hub.Record(ref("hot"), scrapeSample(t0.Add(time.Duration(i)*time.Millisecond), 1, 1))
	}
	if w, _ := c.hub.pendingWork(d.addr); w > cfg.HighWater+1 {
		t.Errorf("%d samples wait for a stuck decider, want at most the high water mark %d", w, cfg.HighWater)
	}
	if got := gathered.Sum(t, c.reg, "tidal_collector_stream_replays_total", "overflow"); got < 1 {
		t.Errorf("replays{cause=overflow} = %v, want at least 1", got)
	}
	close(block)
	if err := c.hub.WaitRoom(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "every sample to arrive exactly once", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		ts := d.state[ref("hot").Key()]
		if ts == nil {
			return false
		}
		var sum float64
		for _, v := range ts.seconds {
			sum += v
		}
		return sum == 20000
	})
}

func connected(h *Hub, addr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ob := h.outboxes[addr]
	return ob != nil && ob.connected
}

func testLogger(t testing.TB) *zap.Logger {
	if testing.Verbose() {
		return zap.NewExample()
	}
	return zap.NewNop()
}

func TestOverflowEndsStreamAndHoldsPushers(t *testing.T) {
	hub := New(Config{Retention: time.Hour, HighWater: 5}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	hub.SetSpec(spec("x"), 0)
	cancelled := 0
	hub.connect("d:1", func() { cancelled++ })
	hub.take("d:1", 100) // the replay on connect
	hub.caughtUp("d:1")
	t0 := time.Now()
	for i := range 6 {
		hub.Record(ref("x"), scrapeSample(t0.Add(time.Duration(i)*time.Millisecond), 1, 1))
	}
	if cancelled != 1 || connected(hub, "d:1") {
		t.Fatalf("after overflow: stream cancelled %d times, connected %v; want the stream ended", cancelled, connected(hub, "d:1"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := hub.WaitRoom(ctx); err == nil {
		t.Fatal("WaitRoom returned while the decider is behind")
	}
	waited := make(chan error, 1)
	go func() { waited <- hub.WaitRoom(context.Background()) }()
	// The sender reconnects: the replay holds all 6 samples.
	hub.connect("d:1", func() {})
	bs := hub.take("d:1", 100)
	if len(bs.replay) != 1 || len(bs.replay[0].GetMetrics()[0].GetSamples()) != 6 {
		t.Fatalf("replay after overflow = %v, want the 6 samples", bs.replay)
	}
	hub.caughtUp("d:1")
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRoom still waiting after the decider caught up")
	}
}

func TestReadyPodsReachTheDecider(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	hub := New(Config{Retention: time.Hour, HighWater: 100, Now: clock}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	hub.SetSpec(spec("x"), 0)
	hub.SetReadyPods(ref("x"), 3)
	hub.connect("d:1", func() {})
	bs := hub.take("d:1", 100)
	if len(bs.replay) != 1 {
		t.Fatalf("replay = %v, want one batch", bs.replay)
	}
	// The change is history: the replay carries it as a sample at its time,
	// not as a count to take as of the replay.
	m := bs.replay[0].GetMetrics()[0]
	if m.ReadyPods != nil || len(m.GetSamples()) != 1 || !isReady(m.GetSamples()[0], now, 3) {
		t.Fatalf("replayed metrics = %v, want one PODS sample of 3 at %s and no ready_pods", m, now)
	}
	hub.caughtUp("d:1")
	// The last pod goes: nothing is scraped, but the decider must hear of it.
	now = now.Add(1500 * time.Millisecond)
	hub.SetReadyPods(ref("x"), 0)
	bs = hub.take("d:1", 100)
	if len(bs.live) != 1 || len(bs.live[0].GetMetrics()) != 1 {
		t.Fatalf("live batches after ready 3 → 0 = %v, want one with the target", bs.live)
	}
	if m := bs.live[0].GetMetrics()[0]; m.ReadyPods != nil || len(m.GetSamples()) != 1 || !isReady(m.GetSamples()[0], now, 0) {
		t.Errorf("live metrics = %v, want one PODS sample of 0 at %s", m, now)
	}
	// An unchanged count is not sent again.
	hub.SetReadyPods(ref("x"), 0)
	if bs = hub.take("d:1", 100); len(bs.live) != 0 {
		t.Errorf("unchanged ready count sent again: %v", bs.live)
	}
	// A target whose count never changed within its history gets the
	// count itself with a replay.
	hub.SetSpec(spec("y"), 0)
	hub.targets[keyOf(ref("y"))].ready = 2
	hub.disconnect("d:1")
	hub.connect("d:1", func() {})
	for _, b := range hub.take("d:1", 100).replay {
		for _, m := range b.GetMetrics() {
			if m.GetTarget().GetName() == "y" && (m.ReadyPods == nil || m.GetReadyPods() != 2) {
				t.Errorf("replay of y = %v, want ready_pods 2", m)
			}
			if m.GetTarget().GetName() == "x" && (m.ReadyPods != nil || len(m.GetSamples()) != 2) {
				t.Errorf("replay of x = %v, want its two changes and no ready_pods", m)
			}
		}
	}
}

func isReady(s *commonv1.MetricSample, at time.Time, n int32) bool {
	return s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PODS && s.ReadyPods != nil && s.GetReadyPods() == n && s.GetTime().AsTime().Equal(at)
}

func TestShadowDeciderGetsEveryTarget(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	hub := New(Config{Retention: time.Hour, HighWater: 4, Shadows: []string{"shadow:1"}}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	// A shadow listed among the deciders stays a shadow, not an owner.
	hub.setDeciders([]string{"d:1", "d:2", "shadow:1"})
	if !slices.Equal(hub.members, []string{"d:1", "d:2"}) {
		t.Fatalf("members = %v, want the shadow left out", hub.members)
	}
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		hub.SetSpec(spec(n), 0)
		hub.Record(ref(n), scrapeSample(at, 1, 1))
	}
	for _, a := range []string{"d:1", "d:2", "shadow:1"} {
		hub.connect(a, func() {})
	}
	targetsOf := func(reqs []*deciderv1.IngestRequest) []string {
		var out []string
		for _, r := range reqs {
			for _, m := range r.GetMetrics() {
				out = append(out, m.GetTarget().GetName())
			}
		}
		slices.Sort(out)
		return out
	}
	owned := append(targetsOf(hub.take("d:1", 100).replay), targetsOf(hub.take("d:2", 100).replay)...)
	slices.Sort(owned)
	if !slices.Equal(owned, names) {
		t.Errorf("owners replayed %v, want each target once: %v", owned, names)
	}
	if got := targetsOf(hub.take("shadow:1", 100).replay); !slices.Equal(got, names) {
		t.Errorf("shadow replayed %v, want every target %v", got, names)
	}
	// Live samples reach the owner and the shadow.
	hub.Record(ref("a"), scrapeSample(at.Add(time.Second), 2, 1))
	owner := hub.targets[keyOf(ref("a"))].owner
	if got := targetsOf(hub.take(owner, 100).live); !slices.Equal(got, []string{"a"}) {
		t.Errorf("owner %s got %v, want a", owner, got)
	}
	if got := targetsOf(hub.take("shadow:1", 100).live); !slices.Equal(got, []string{"a"}) {
		t.Errorf("shadow got %v, want a", got)
	}
	// A shadow that falls behind is reset for a replay, but PushStats does
	// not wait for it.
	for i := range 5 {
		hub.Record(ref("a"), scrapeSample(at.Add(time.Duration(2+i)*time.Second), 2, 1))
		_ = hub.take(owner, 100)
	}
	if hub.outboxes["shadow:1"].connected {
		t.Error("shadow still connected after overflowing its queue")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := hub.WaitRoom(ctx); err != nil {
		t.Errorf("WaitRoom with only a shadow behind: %v, want no wait", err)
	}
	// Removing a target tells the owner and the shadow.
	hub.connect("shadow:1", func() {})
	_ = hub.take("shadow:1", 100)
	bOwner := hub.targets[keyOf(ref("b"))].owner
	hub.Remove(ref("b"))
	for _, a := range []string{bOwner, "shadow:1"} {
		if r := hub.outboxes[a].removed; len(r) != 1 || r[0].GetName() != "b" {
			t.Errorf("%s removed = %v, want b", a, r)
		}
	}
}

func TestPushedTargetsAreBoundedAndExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	hub := New(Config{Retention: time.Minute, HighWater: 1000, MaxTargets: 3, PushedTTL: time.Minute, Now: func() time.Time { return now }},
		NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	hub.connect("d:1", func() {})
	push := func(names ...string) (int, bool) {
		refs := make([]*commonv1.TargetRef, len(names))
		samples := make([]*commonv1.MetricSample, len(names))
		for i, n := range names {
			refs[i], samples[i] = ref(n), scrapeSample(now, 1, 1)
		}
		return hub.RecordPushed(refs, samples, true)
	}
	if i, full := push("a", "b"); i >= 0 || full {
		t.Fatalf("push a, b = %d, %v; want recorded", i, full)
	}
	// Two new targets do not fit in the one place left: nothing of the call
	// is recorded.
	if i, full := push("a", "c", "d"); i != 1 || !full {
		t.Fatalf("push a, c, d = %d, %v; want refused at 1 (full)", i, full)
	}
	if hub.Known(ref("c")) || len(hub.targets) != 2 {
		t.Fatalf("targets after a refused call: %d, c known %v; want a and b only", len(hub.targets), hub.Known(ref("c")))
	}
	// A discovered target counts against the bound too; TrySetSpec says
	// which were taken.
	tookX, tookY := hub.TrySetSpec(spec("x"), 0), hub.TrySetSpec(spec("y"), 0)
	if !hub.Known(ref("x")) || hub.Known(ref("y")) || !tookX || tookY {
		t.Fatalf("x known %v (took %v), y known %v (took %v); want x taken and y refused at the bound", hub.Known(ref("x")), tookX, hub.Known(ref("y")), tookY)
	}
	if !hub.TrySetSpec(spec("x"), 0) {
		t.Error("TrySetSpec of a held target at the bound = false, want true")
	}
	// a keeps pushing; b goes quiet and expires after a minute, making room.
	_ = hub.take("d:1", 1000)
	now = now.Add(40 * time.Second)
	if i, _ := push("a"); i >= 0 {
		t.Fatal("push a refused")
	}
	now = now.Add(30 * time.Second)
	if i, full := push("c"); i >= 0 || full {
		t.Fatalf("push c after b expired = %d, %v; want recorded", i, full)
	}
	if hub.Known(ref("b")) || !hub.Known(ref("a")) || !hub.Known(ref("x")) {
		t.Errorf("after expiry: a %v, b %v, x %v; want a and x kept, b gone", hub.Known(ref("a")), hub.Known(ref("b")), hub.Known(ref("x")))
	}
	var removed []string
	for _, b := range hub.take("d:1", 1000).live {
		for _, r := range b.GetRemoved() {
			removed = append(removed, r.GetName())
		}
	}
	if !slices.Equal(removed, []string{"b"}) {
		t.Errorf("decider told to forget %v, want [b]", removed)
	}
	// A discovered target never expires.
	now = now.Add(time.Hour)
	if i, _ := push("z"); i >= 0 {
		t.Fatal("push z refused after everything pushed expired")
	}
	if !hub.Known(ref("x")) || hub.Known(ref("a")) {
		t.Errorf("an hour later: x %v, a %v; want the discovered x kept and the pushed a expired", hub.Known(ref("x")), hub.Known(ref("a")))
	}
}

func TestLongErrorIsCutForTheDecider(t *testing.T) {
	hub := New(Config{Retention: time.Minute, HighWater: 100}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	hub.SetSpec(spec("x"), 0)
	hub.connect("d:1", func() {})
	_ = hub.take("d:1", 100)
	hub.SetError(ref("x"), "broker said:\n\x1b[31m"+strings.Repeat("x", 20000))
	live := hub.take("d:1", 100).live
	if len(live) != 1 || len(live[0].GetMetrics()) != 1 {
		t.Fatalf("live batches %v, want one with the target's error", live)
	}
	m := live[0].GetMetrics()[0]
	msg := m.GetMeasureError()
	if len(msg) > deciderv1.MaxMeasureError+8 || strings.ContainsAny(msg, "\n\x1b") {
		t.Fatalf("measure_error sent is %d bytes (%.40q…), want at most about %d printable bytes", len(msg), msg, deciderv1.MaxMeasureError)
	}
	if err := (&deciderv1.IngestRequest{CollectorId: "c", Metrics: []*deciderv1.TargetMetrics{m}}).Validate(); err != nil {
		t.Fatalf("the decider would refuse the batch: %v", err)
	}
}

// TestKnativeConfigGoesFirstOnEveryStream: the Knative configuration reaches
// a connected decider at once when it changes, and a decider that
// (re)connects gets it in the batch that carries its first specs, so no
// spec is resolved against anything else.
func TestKnativeConfigGoesFirstOnEveryStream(t *testing.T) {
	d := startDecider(t, "")
	c := startCollector(t, testConfig(t), time.Minute, d.addr)
	c.hub.SetSpec(spec("alpha"), 0)
	c.hub.Record(ref("alpha"), scrapeSample(time.Now(), 1, 1))
	testkit.Eventually(t, 10*time.Second, "the first batch", func() bool { return len(d.keys()) == 1 })
	if got := d.takeBatches(); got[0].GetKnativeConfig() != nil {
		t.Fatalf("a Knative configuration before one was set: %v", got[0])
	}

	kc := func(window string) *deciderv1.KnativeConfig {
		return &deciderv1.KnativeConfig{Autoscaler: &deciderv1.ConfigMapData{Data: map[string]string{"stable-window": window}}}
	}
	configs := func(bs []*deciderv1.IngestRequest) []string {
		var out []string
		for _, b := range bs {
			if k := b.GetKnativeConfig(); k != nil {
				out = append(out, k.GetAutoscaler().GetData()["stable-window"])
			}
		}
		return out
	}
	var seen []*deciderv1.IngestRequest
	c.hub.SetKnativeConfig(kc("20s"))
	testkit.Eventually(t, 10*time.Second, "the configuration sent", func() bool {
		seen = append(seen, d.takeBatches()...)
		return len(configs(seen)) > 0
	})
	if got := configs(seen); !slices.Equal(got, []string{"20s"}) {
		t.Errorf("configurations sent %v, want [20s] once", got)
	}

	// A restarted decider: the replay batch with the spec carries it.
	d.stop()
	d2 := startDecider(t, d.addr)
	testkit.Eventually(t, 10*time.Second, "the replay", func() bool { return len(d2.keys()) == 1 })
	bs := d2.takeBatches()
	if len(bs) == 0 || !bs[0].GetReplay() || len(bs[0].GetSpecs()) != 1 || configs(bs[:1])[0] != "20s" {
		t.Fatalf("first batch on the new stream %v, want the replay carrying the spec and the configuration", bs)
	}

	c.hub.SetKnativeConfig(kc("8s"))
	seen = nil
	testkit.Eventually(t, 10*time.Second, "the edit sent", func() bool {
		seen = append(seen, d2.takeBatches()...)
		return slices.Contains(configs(seen), "8s")
	})
}

// TestCompleteBeforeGoesAfterItsSamples: the scraper's word that every
// sample before a time is in goes to the decider at once, after the samples
// recorded before it, and once; while the scraper is ahead of the clock the
// stream says "everything before now" just after each whole second.
func TestCompleteBeforeGoesAfterItsSamples(t *testing.T) {
	d := startDecider(t, "")
	cfg := testConfig(t)
	cfg.FlushInterval = time.Hour // only what is urgent goes out
	c := startCollector(t, cfg, time.Minute, d.addr)
	testkit.Eventually(t, 10*time.Second, "the stream to open", func() bool { return connected(c.hub, d.addr) })
	for _, n := range []string{"a", "b"} {
		c.hub.SetSpec(spec(n), 0)
		c.hub.SetReadyPods(ref(n), 1)
	}
	round := time.Now().Add(-3 * time.Second)
	c.hub.Record(ref("a"), scrapeSample(round, 1, 1))
	c.hub.Record(ref("b"), scrapeSample(round, 2, 1))
	time.Sleep(50 * time.Millisecond)
	if b := d.takeBatches(); len(b) != 0 {
		t.Fatalf("samples went out before the flush interval: %v", b)
	}
	c.hub.CompleteBefore(round.Add(time.Second))
	var got []*deciderv1.IngestRequest
	testkit.Eventually(t, 10*time.Second, "the batch saying so", func() bool {
		got = append(got, d.takeBatches()...)
		return len(got) > 0 && got[len(got)-1].GetScrapesCompleteBefore() != nil
	})
	samples := 0
	for i, b := range got {
		for _, m := range b.GetMetrics() {
			for _, s := range m.GetSamples() {
				if s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE {
					samples++
				}
			}
		}
		if c := b.GetScrapesCompleteBefore(); c != nil && (i != len(got)-1 || !c.AsTime().Equal(round.Add(time.Second))) {
			t.Errorf("batch %d of %d carries %v, want only the last, with %v", i, len(got), c.AsTime(), round.Add(time.Second))
		}
	}
	if samples != 2 {
		t.Errorf("%d scrape samples up to the batch saying every one before %v is in, want 2", samples, round.Add(time.Second))
	}
	c.hub.CompleteBefore(round.Add(time.Second)) // not later: nothing to say
	c.hub.CompleteBefore(round)
	time.Sleep(50 * time.Millisecond)
	if b := d.takeBatches(); len(b) != 0 {
		t.Errorf("a time no later than the last went out: %v", b)
	}
	c.hub.CompleteBefore(round.Add(2 * time.Second)) // alone
	testkit.Eventually(t, 10*time.Second, "the next time, alone", func() bool {
		b := d.takeBatches()
		return len(b) == 1 && b[0].GetScrapesCompleteBefore().AsTime().Equal(round.Add(2*time.Second)) && len(b[0].GetMetrics()) == 0
	})

	// The next round starts in an hour: the stream says "before now" at
	// once, then once a second, just after the whole second.
	c.hub.CompleteBefore(time.Now().Add(time.Hour))
	start := time.Now()
	var claims []time.Time
	testkit.Eventually(t, 20*time.Second, "four times said", func() bool {
		for _, b := range d.takeBatches() {
			if c := b.GetScrapesCompleteBefore(); c != nil {
				claims = append(claims, c.AsTime())
			}
		}
		return len(claims) >= 4
	})
	if n, most := len(claims), int(time.Since(start)/time.Second)+2; n > most {
		t.Errorf("%d times said in %v: %v; want the first and one a second", n, time.Since(start), claims)
	}
	for i := 1; i < len(claims); i++ {
		if !claims[i].Truncate(time.Second).After(claims[i-1].Truncate(time.Second)) {
			t.Errorf("said %v after %v: want each in a later second", claims[i], claims[i-1])
		}
	}
}

// TestLiveBatchOrder: a turn sends its targets in the order their news came,
// and a target removed and discovered again within the turn goes once, with
// only what came after its removal, behind the decider's order to forget it.
func TestLiveBatchOrder(t *testing.T) {
	hub := New(Config{Retention: time.Hour, HighWater: 100}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	for _, n := range []string{"a", "b", "c"} {
		hub.SetSpec(spec(n), 0)
	}
	hub.connect("d:1", func() {})
	_ = hub.take("d:1", 100) // the replay on connect
	t0 := time.Now()
	for i, n := range []string{"c", "a", "b"} {
		hub.Record(ref(n), scrapeSample(t0.Add(time.Duration(i)*time.Millisecond), 1, 1))
	}
	hub.Remove(ref("a"))
	hub.SetSpec(spec("a"), 0)
	hub.Record(ref("a"), scrapeSample(t0.Add(time.Second), 7, 1))
	live := hub.take("d:1", 100).live
	var got []string
	var removed []string
	for _, b := range live {
		for _, r := range b.GetRemoved() {
			removed = append(removed, r.GetName())
		}
		for _, m := range b.GetMetrics() {
			got = append(got, fmt.Sprintf("%s:%d", m.GetTarget().GetName(), len(m.GetSamples())))
			if m.GetTarget().GetName() == "a" && m.GetSamples()[0].GetAverageConcurrency() != 7 {
				t.Errorf("a sent %v, want only the sample after its removal", m.GetSamples())
			}
		}
	}
	if want := []string{"c:1", "b:1", "a:1"}; !slices.Equal(got, want) {
		t.Errorf("live metrics in order %v, want %v", got, want)
	}
	if !slices.Equal(removed, []string{"a"}) {
		t.Errorf("removed %v, want [a]", removed)
	}
	if bs := hub.take("d:1", 100); len(bs.live) != 0 {
		t.Errorf("a second take sent %v, want nothing", bs.live)
	}
}

// TestChurnBetweenTurnsIsBounded: a target removed and found again many
// times between two turns leaves the outbox no bigger than a few entries,
// and the turn sends it once.
func TestChurnBetweenTurnsIsBounded(t *testing.T) {
	hub := New(Config{Retention: time.Hour, HighWater: 100}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	hub.setDeciders([]string{"d:1"})
	hub.SetSpec(spec("a"), 0)
	hub.connect("d:1", func() {})
	_ = hub.take("d:1", 100) // the replay on connect
	for range 10000 {
		hub.Remove(ref("a"))
		hub.SetSpec(spec("a"), 0)
	}
	hub.mu.Lock()
	n := len(hub.outboxes["d:1"].order)
	hub.mu.Unlock()
	if n > 200 {
		t.Errorf("outbox holds %d entries for one target after churn, want a few", n)
	}
	var specs int
	for _, b := range hub.take("d:1", 100).live {
		specs += len(b.GetSpecs())
	}
	if specs != 1 {
		t.Errorf("the turn sent %d specs of a, want 1", specs)
	}
}
