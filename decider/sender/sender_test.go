package sender

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/fairqueue"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/testkit"
)

// actuator is a Scale server over real gRPC that records every call and
// lets the test decide when each returns.
type actuator struct {
	actuatorv1.UnimplementedActuatorServiceServer
	// reply, when set, answers a call; nil means success.
	reply func(req *actuatorv1.ScaleRequest) error
	// gate, when set, holds every call until it is closed.
	gate chan struct{}

	mu sync.Mutex
	// stale names the targets whose calls are answered as stale, gone
	// those the engine no longer holds.
	stale, gone map[string]bool
	// records names the targets whose status records a decision once it
	// was sent: a later call with it is answered as recorded.
	records  map[string]bool
	calls    []*actuatorv1.ScaleRequest
	inFlight map[string]int
	maxAll   int
	maxOne   int
	all      int
}

func (a *actuator) Scale(ctx context.Context, req *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	key := req.GetTarget().Key()
	a.mu.Lock()
	recorded := a.records[key] && slices.ContainsFunc(a.calls, func(c *actuatorv1.ScaleRequest) bool {
		return c.GetTarget().Key() == key && c.GetDecisionSequence() >= req.GetDecisionSequence()
	})
	a.calls = append(a.calls, req)
	a.inFlight[key]++
	a.all++
	a.maxOne = max(a.maxOne, a.inFlight[key])
	a.maxAll = max(a.maxAll, a.all)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inFlight[key]--
		a.all--
		a.mu.Unlock()
	}()
	if a.gate != nil {
		select {
		case <-a.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if a.reply != nil {
		if err := a.reply(req); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	stale := a.stale[key]
	a.mu.Unlock()
	return &actuatorv1.ScaleResponse{AppliedReplicas: req.GetDesiredReplicas(), Stale: stale, Recorded: recorded}, nil
}

// live is the engine's Has: every target but those marked gone.
func (a *actuator) live(t engine.Target) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.gone[t.Key()]
}

// callsOf returns the sequences of the calls made for target name.
func (a *actuator) callsOf(name string) []uint64 {
	calls, _, _ := a.snapshot()
	var seqs []uint64
	for _, c := range calls {
		if c.GetTarget().GetName() == name {
			seqs = append(seqs, c.GetDecisionSequence())
		}
	}
	return seqs
}

func (a *actuator) snapshot() (calls []*actuatorv1.ScaleRequest, maxAll, maxOne int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*actuatorv1.ScaleRequest(nil), a.calls...), a.maxAll, a.maxOne
}

// start serves a on loopback and runs a Sender against it until the test ends.
func start(t *testing.T, a *actuator, cfg Config) *Sender {
	t.Helper()
	a.inFlight = map[string]int{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	actuatorv1.RegisterActuatorServiceServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := New(cfg, actuatorv1.NewActuatorServiceClient(conn), a.live, zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close()
		srv.Stop()
	})
	return s
}

func decision(name string, seq uint64, desired int32) engine.Decision {
	return engine.Decision{Target: engine.Target{Namespace: "ns", Name: name}, Strategy: engine.KPA, Sequence: seq, Desired: desired}
}

func TestConcurrentAcrossTargetsOneAtATimePerTarget(t *testing.T) {
	const workers, targets = 8, 50
	a := &actuator{gate: make(chan struct{})}
	s := start(t, a, Config{Workers: workers})
	var ds []engine.Decision
	for i := range targets {
		ds = append(ds, decision(fmt.Sprintf("t%d", i), 1, 1))
	}
	s.Enqueue(ds)
	testkit.Eventually(t, 20*time.Second, "a full pool of calls", func() bool { _, all, _ := a.snapshot(); return all == workers })
	// Newer decisions for targets whose calls are held: they wait, and are
	// never sent beside the call in flight.
	for i := range targets {
		s.Enqueue([]engine.Decision{decision(fmt.Sprintf("t%d", i), 2, 2), decision(fmt.Sprintf("t%d", i), 3, 3)})
	}
	close(a.gate)
	testkit.Eventually(t, 20*time.Second, "every target's newest decision", func() bool {
		calls, _, _ := a.snapshot()
		n := 0
		for _, c := range calls {
			if c.GetDecisionSequence() == 3 {
				n++
			}
		}
		return n == targets
	})
	calls, maxAll, maxOne := a.snapshot()
	if maxAll != workers {
		t.Errorf("most calls in flight = %d, want %d (the pool)", maxAll, workers)
	}
	if maxOne != 1 {
		t.Errorf("most calls in flight for one target = %d, want 1", maxOne)
	}
	last := map[string]uint64{}
	for _, c := range calls {
		k := c.GetTarget().Key()
		if c.GetDecisionSequence() <= last[k] {
			t.Errorf("target %s: sequence %d sent after %d", k, c.GetDecisionSequence(), last[k])
		}
		last[k] = c.GetDecisionSequence()
	}
	if len(calls) > 2*targets {
		t.Errorf("%d calls for %d targets with 3 decisions each: a superseded decision was sent", len(calls), targets)
	}
	if p := s.Pending(); p != 0 {
		t.Errorf("Pending() = %d after everything was sent, want 0", p)
	}
}

func TestRetryAndRefusal(t *testing.T) {
	tests := []struct {
		name      string
		code      codes.Code
		wantCalls int
	}{
		{"unavailable is retried", codes.Unavailable, 3},
		{"invalid argument is not", codes.InvalidArgument, 1},
		{"not found is not", codes.NotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			fails := 2
			a := &actuator{reply: func(*actuatorv1.ScaleRequest) error {
				mu.Lock()
				defer mu.Unlock()
				if tt.code == codes.Unavailable && fails == 0 {
					return nil
				}
				fails--
				return status.Error(tt.code, "no")
			}}
			s := start(t, a, Config{Workers: 2})
			s.Enqueue([]engine.Decision{decision("t", 7, 4)})
			testkit.Eventually(t, 20*time.Second, "the calls", func() bool { c, _, _ := a.snapshot(); return len(c) >= tt.wantCalls })
			time.Sleep(50 * time.Millisecond) // five backoffs' worth: no further call may come
			if c, _, _ := a.snapshot(); len(c) != tt.wantCalls {
				t.Errorf("calls = %d, want %d", len(c), tt.wantCalls)
			}
		})
	}
}

// TestDeferredIsNoFailure: a call the actuator defers (RESOURCE_EXHAUSTED,
// its write budget short) is counted as deferred, not as an error, and is
// sent again with the target's newest decision.
func TestDeferredIsNoFailure(t *testing.T) {
	var s *Sender
	var mu sync.Mutex
	n := 0
	a := &actuator{reply: func(req *actuatorv1.ScaleRequest) error {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 1 {
			// A newer decision comes while the first call waits.
			s.Enqueue([]engine.Decision{decision("t", 8, 2)})
		}
		if n <= 2 {
			return status.Error(codes.ResourceExhausted, "write budget: deferred: waited 2.5s in class down")
		}
		return nil
	}}
	s = start(t, a, Config{Workers: 2})
	s.Enqueue([]engine.Decision{decision("t", 7, 4)})
	testkit.Eventually(t, 20*time.Second, "the calls", func() bool { c, _, _ := a.snapshot(); return len(c) >= 3 })
	testkit.Eventually(t, 20*time.Second, "nothing pending", func() bool { return s.Pending() == 0 })
	calls, _, _ := a.snapshot()
	var seqs []uint64
	for _, c := range calls {
		seqs = append(seqs, c.GetDecisionSequence())
	}
	if !slices.Equal(seqs, []uint64{7, 8, 8}) {
		t.Errorf("calls' sequences %v, want [7 8 8]: deferred, then the newest until it is taken", seqs)
	}
	deferred, failed := s.count(t, "deferred"), s.count(t, "error")
	if deferred != 2 || failed != 0 {
		t.Errorf("calls deferred %g, failed %g; want 2, 0", deferred, failed)
	}
}

func TestInvalidAndOlderDecisionsAreNotSent(t *testing.T) {
	a := &actuator{gate: make(chan struct{})}
	s := start(t, a, Config{Workers: 1})
	s.Enqueue([]engine.Decision{decision("busy", 1, 1)})
	testkit.Eventually(t, 20*time.Second, "the first call", func() bool { c, _, _ := a.snapshot(); return len(c) == 1 })
	unknown := decision("x", 5, -1)
	advisory := decision("keda", 6, 3)
	advisory.Advisory = true
	s.Enqueue([]engine.Decision{decision("t", 9, 2), decision("t", 4, 8), unknown, advisory})
	if p := s.Pending(); p != 1 {
		t.Fatalf("Pending() = %d, want 1 (t's newest only; the invalid and the advisory ones are never queued)", p)
	}
	close(a.gate)
	testkit.Eventually(t, 20*time.Second, "t's call", func() bool { c, _, _ := a.snapshot(); return len(c) == 2 })
	calls, _, _ := a.snapshot()
	if got := calls[1]; got.GetTarget().GetName() != "t" || got.GetDecisionSequence() != 9 || got.GetDesiredReplicas() != 2 {
		t.Errorf("second call = %v, want t's decision 9 for 2 replicas", got)
	}
}

func kpaDecision(ns, name string, seq uint64, ready, desired int32) engine.Decision {
	return engine.Decision{
		Target: engine.Target{Namespace: ns, Name: name}, Strategy: engine.KPA, Sequence: seq, Desired: desired,
		KPA: &kpa.Decision{ReadyPods: ready},
	}
}

func TestClass(t *testing.T) {
	lagDecision := func(observed int32, known bool, before, desired int32) engine.Decision {
		return engine.Decision{Strategy: engine.Lag, Desired: desired, Sequence: 1,
			Lag: &lag.Decision{ObservedReplicas: observed, ObservedKnown: known, ReplicasBefore: before}}
	}
	capped := kpaDecision("ns", "t", 1, 3, 9)
	capped.MaxScale = 3
	tests := []struct {
		name string
		d    engine.Decision
		want fairqueue.Class
	}{
		{"kpa from zero ready", kpaDecision("ns", "t", 1, 0, 2), fairqueue.Wake},
		{"kpa more than ready", kpaDecision("ns", "t", 1, 2, 5), fairqueue.Up},
		{"kpa fewer than ready", kpaDecision("ns", "t", 1, 5, 2), fairqueue.Down},
		{"kpa to zero", kpaDecision("ns", "t", 1, 1, 0), fairqueue.Down},
		{"kpa above max-scale asks for the cap only", capped, fairqueue.Down},
		{"lag observed at zero", lagDecision(0, true, 4, 1), fairqueue.Wake},
		{"lag unobserved, from its last decision", lagDecision(0, false, 2, 1), fairqueue.Down},
		{"lag unobserved, up from its last decision", lagDecision(0, false, 2, 3), fairqueue.Up},
		{"nothing seen asks for pods", decision("t", 1, 1), fairqueue.Up},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Class(&tt.d); got != tt.want {
				t.Errorf("Class = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestSlowActuatorWakesFirst holds the only worker's call while decisions
// pile up, then lets the actuator answer one call at a time: wakes go first,
// namespaces in turn, then scale-ups, then scale-downs; a target's newer
// decision replaces its waiting one (and takes its class), and no target's
// older decision is ever sent after a newer one.
func TestSlowActuatorWakesFirst(t *testing.T) {
	step := make(chan struct{})
	a := &actuator{gate: step}
	// One call is answered per value sent on step: the gate is read once
	// per call.
	s := start(t, a, Config{Workers: 1})
	s.Enqueue([]engine.Decision{kpaDecision("z", "blocker", 1, 1, 0)})
	testkit.Eventually(t, 20*time.Second, "the blocker's call", func() bool { c, _, _ := a.snapshot(); return len(c) == 1 })

	s.Enqueue([]engine.Decision{
		kpaDecision("a", "down1", 10, 5, 1),
		kpaDecision("a", "down2", 10, 5, 2),
		kpaDecision("b", "down3", 10, 5, 3),
		kpaDecision("a", "up1", 10, 1, 4),
		kpaDecision("b", "up2", 10, 1, 5),
		kpaDecision("a", "wake1", 10, 0, 1),
		kpaDecision("a", "wake2", 10, 0, 1),
		kpaDecision("c", "wake3", 10, 0, 1),
		// Its blocker's newer decision waits behind the call in flight.
		kpaDecision("z", "blocker", 2, 0, 7),
	})
	// Newer decisions: down2's replaces the waiting one; down1 is woken
	// (scaled to zero meanwhile) and moves to the wakes; an older one of
	// up1's is dropped.
	s.Enqueue([]engine.Decision{
		kpaDecision("a", "down2", 11, 5, 0),
		kpaDecision("a", "down1", 12, 0, 3),
		kpaDecision("a", "up1", 9, 1, 9),
	})
	if p := s.Pending(); p != 9 {
		t.Fatalf("Pending() = %d, want 9 (one per target)", p)
	}
	want := []string{
		"z/blocker@1",
		// The blocker's call ended: its newer one (a wake) took its
		// namespace's turn behind a and c.
		"a/wake1@10", "c/wake3@10", "z/blocker@2", "a/wake2@10", "a/down1@12",
		"a/up1@10", "b/up2@10",
		"a/down2@11", "b/down3@10",
	}
	for i := 1; i <= len(want); i++ {
		step <- struct{}{}
		if i < len(want) {
			testkit.Eventually(t, 20*time.Second, "the next call", func() bool { c, _, _ := a.snapshot(); return len(c) == i+1 })
		}
	}
	testkit.Eventually(t, 20*time.Second, "nothing pending", func() bool { return s.Pending() == 0 })
	calls, _, _ := a.snapshot()
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%s/%s@%d", c.GetTarget().GetNamespace(), c.GetTarget().GetName(), c.GetDecisionSequence()))
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls in order:\n got %v\nwant %v", got, want)
	}
	// Every call names its class, so the actuator's budget orders it the same.
	wantClass := map[string]actuatorv1.ScaleClass{
		"z/blocker@1": actuatorv1.ScaleClass_SCALE_CLASS_DOWN, "z/blocker@2": actuatorv1.ScaleClass_SCALE_CLASS_WAKE,
		"a/wake1@10": actuatorv1.ScaleClass_SCALE_CLASS_WAKE, "a/down1@12": actuatorv1.ScaleClass_SCALE_CLASS_WAKE,
		"a/up1@10": actuatorv1.ScaleClass_SCALE_CLASS_UP, "a/down2@11": actuatorv1.ScaleClass_SCALE_CLASS_DOWN,
	}
	for i, c := range calls {
		if want, ok := wantClass[got[i]]; ok && c.GetScaleClass() != want {
			t.Errorf("%s: class %s, want %s", got[i], c.GetScaleClass(), want)
		}
		if c.GetScaleClass() == actuatorv1.ScaleClass_SCALE_CLASS_UNSPECIFIED {
			t.Errorf("%s: no class", got[i])
		}
	}
}

// count is the Sender's calls of result.
func (s *Sender) count(t *testing.T, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.calls.WithLabelValues(result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestRefresh: the decision the actuator took is sent again, unchanged,
// after Refresh without a newer one; not one the actuator answered as
// stale, nor one of a target the engine dropped, nor, once more, one the
// actuator answered as recorded in the target's status.
func TestRefresh(t *testing.T) {
	a := &actuator{stale: map[string]bool{"ns/old": true}, gone: map[string]bool{}, records: map[string]bool{"ns/recorded": true}}
	s := start(t, a, Config{Workers: 2, Refresh: time.Second})
	s.Enqueue([]engine.Decision{decision("kept", 7, 4), decision("old", 7, 4), decision("dropped", 7, 4), decision("forgotten", 7, 4), decision("recorded", 7, 4)})
	testkit.Eventually(t, 20*time.Second, "the first calls", func() bool { c, _, _ := a.snapshot(); return len(c) == 5 })
	a.mu.Lock()
	a.gone["ns/dropped"] = true
	a.mu.Unlock()
	s.Forget(engine.Target{Namespace: "ns", Name: "forgotten"})
	testkit.Eventually(t, 20*time.Second, "two refreshes", func() bool { return len(a.callsOf("kept")) >= 3 })
	if got := a.callsOf("kept"); !slices.Equal(got, []uint64{7, 7, 7}) {
		t.Errorf("kept: calls' sequences %v, want [7 7 7]: the decision taken, sent again as it was", got)
	}
	for _, name := range []string{"old", "dropped", "forgotten"} {
		if got := a.callsOf(name); len(got) != 1 {
			t.Errorf("%s: calls' sequences %v, want one call", name, got)
		}
	}
	if got := a.callsOf("recorded"); !slices.Equal(got, []uint64{7, 7}) {
		t.Errorf("recorded: calls' sequences %v, want [7 7]: sent, sent again once, then answered as recorded", got)
	}
	// A newer decision replaces the one sent again, and is the one kept.
	s.Enqueue([]engine.Decision{decision("kept", 9, 2)})
	testkit.Eventually(t, 20*time.Second, "the newer decision sent again", func() bool {
		got := a.callsOf("kept")
		return len(got) >= 2 && got[len(got)-1] == 9 && got[len(got)-2] == 9
	})
	if n := s.count(t, "applied"); n < 6 {
		t.Errorf("applied calls = %g, want at least 6", n)
	}
}
