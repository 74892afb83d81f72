package dispatch

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/testkit"
)

// engineDecider is a DeciderService on loopback that feeds the decider's
// real engine the way the Ingest contract says: specs are upserted, the
// first replayed batch for a target on a stream replaces its state
// (engine.Replay), later samples are recorded. Its clock is the test's.
type engineDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
	addr string
	stop func()
	now  func() time.Time

	mu       sync.Mutex
	eng      *engine.Engine
	received int64
	newest   time.Time // of the samples received
}

func newEngine(t testing.TB) *engine.Engine {
	return engine.New(engine.Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
}

func startEngineDecider(t testing.TB, addr string, now func() time.Time) *engineDecider {
	t.Helper()
	d := &engineDecider{now: now, eng: newEngine(t)}
	d.addr, d.stop = testkit.ServeDecider(t, d, addr)
	return d
}

func engineTarget(r *commonv1.TargetRef) engine.Target {
	return engine.Target{Namespace: r.GetNamespace(), Name: r.GetName(), APIVersion: r.GetApiVersion(), Kind: r.GetKind()}
}

func engineSample(s *commonv1.MetricSample) engine.Sample {
	ready := int32(-1)
	if s.ReadyPods != nil {
		ready = s.GetReadyPods()
	}
	return engine.Sample{
		At:        s.GetTime().AsTime(),
		Activator: s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH,
		Stat: kpa.Stat{
			AverageConcurrentRequests: s.GetAverageConcurrency(), AverageProxiedConcurrentRequests: s.GetAverageProxiedConcurrency(),
			RequestCount: s.GetRequestCount(), ProxiedRequestCount: s.GetProxiedRequestCount(),
		},
		ReadyPods: ready,
	}
}

func (d *engineDecider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	replaced := map[string]bool{}
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&deciderv1.IngestResponse{})
		}
		if err != nil {
			return err
		}
		d.mu.Lock()
		now := d.now()
		for _, s := range req.GetSpecs() {
			spec := engine.Spec{Target: engineTarget(s.GetTarget()), Strategy: engine.KPA, Annotations: s.GetAnnotations(),
				ContainerConcurrency: s.GetContainerConcurrency(), Reachable: s.GetReachability() != deciderv1.Reachability_REACHABILITY_UNREACHABLE}
			if err := d.eng.Upsert(spec, now); err != nil {
				d.mu.Unlock()
				return err
			}
		}
		for _, m := range req.GetMetrics() {
			ref := engineTarget(m.GetTarget())
			if req.GetReplay() && !replaced[ref.Key()] {
				replaced[ref.Key()] = true
				samples := make([]engine.Sample, len(m.GetSamples()))
				for i, s := range m.GetSamples() {
					samples[i] = engineSample(s)
				}
				if err := d.eng.Replay(ref, samples, now); err != nil {
					d.mu.Unlock()
					return err
				}
			} else {
				for _, s := range m.GetSamples() {
					_, _ = d.eng.Record(ref, engineSample(s), now)
				}
			}
			d.received += int64(len(m.GetSamples()))
			for _, s := range m.GetSamples() {
				if at := s.GetTime().AsTime(); at.After(d.newest) {
					d.newest = at
				}
			}
		}
		d.mu.Unlock()
	}
}

func (d *engineDecider) count() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.received
}

// has reports whether a sample stamped at or after at has reached the engine.
func (d *engineDecider) has(at time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.newest.Before(at)
}

func (d *engineDecider) tick(now time.Time, ref engine.Target) engine.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eng.Tick(now)
	dec, _ := d.eng.Get(ref)
	return dec
}

// TestRestartedDeciderDecidesLikeUninterruptedOne is the stream's acceptance
// test against the decider's real engine: a decider restarted mid-stream
// (down for 20 s while its stable window is falling) is replayed the retained
// history, and every decision it makes afterwards equals the decision of a
// decider that never stopped.
func TestRestartedDeciderDecidesLikeUninterruptedOne(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	now := func() time.Time { return *clock.Load() }
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	clock.Store(&t0)

	steady := startEngineDecider(t, "", now)
	restarted := startEngineDecider(t, "", now)
	cfg := testConfig(t)
	a := startCollector(t, cfg, 2*time.Minute, steady.addr)
	b := startCollector(t, cfg, 2*time.Minute, restarted.addr)
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "hello"}
	eref := engineTarget(ref)
	spec := &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA,
		Annotations: map[string]string{"autoscaling.knative.dev/target": "10"}}
	a.hub.SetSpec(spec, 0)
	b.hub.SetSpec(spec, 0)

	// Load per second: a spike into panic, a high plateau, then a drop the
	// stable window follows down slowly. The decider is down from 150 s to
	// 170 s, so after its restart its 60 s stable window reaches back to
	// before the outage: only a faithful replay gives the same averages.
	load := func(sec int) float64 {
		switch {
		case sec < 40:
			return 40 + 5*math.Sin(float64(sec)/7)
		case sec < 60:
			return 250
		case sec < 140:
			return 100 + 10*math.Sin(float64(sec)/5)
		default:
			return 30 + 10*math.Sin(float64(sec)/3)
		}
	}
	ready := int32(4)
	var sent int64
	down := false
	cur := restarted
	compared := 0
	for sec := 0; sec < 240; sec++ {
		at := t0.Add(time.Duration(sec) * time.Second)
		if sec%2 == 0 && sec > 0 {
			clock.Store(&at)
			want := steady.tick(at, eref)
			if !down {
				got := cur.tick(at, eref)
				if testing.Verbose() && sec%20 == 0 {
					t.Logf("tick %3d s: uninterrupted %d (panic %v), restarted %d (panic %v)", sec, want.Desired, want.Panicking, got.Desired, got.Panicking)
				}
				if sec > 170 { // after the restart and its replay
					compared++
					if got.Desired != want.Desired || got.Panicking != want.Panicking {
						t.Fatalf("tick %d s: restarted decider decided %d (panicking %v), uninterrupted %d (panicking %v): %s | %s",
							sec, got.Desired, got.Panicking, want.Desired, want.Panicking, got.Reason, want.Reason)
					}
				}
			}
		}
		switch sec {
		case 150:
			restarted.stop()
			down = true
		case 170:
			cur = startEngineDecider(t, restarted.addr, now)
			down = false
		}
		sAt := at.Add(500 * time.Millisecond)
		clock.Store(&sAt)
		if sec == 50 {
			ready = 12 // the actuator scaled up for the spike
		}
		a.hub.Record(ref, scrapeSample(sAt, load(sec), ready))
		b.hub.Record(ref, scrapeSample(sAt, load(sec), ready))
		sent++
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("second %d at the uninterrupted decider", sec), func() bool { return steady.count() >= sent })
		if !down && sec >= 170 {
			// The restarted decider holds the replay (retained span) plus
			// what came live since; wait until this second's sample has
			// reached its engine (taken from the outbox is not enough: a
			// sample that arrives after its tick is late for that tick).
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("second %d at the restarted decider", sec), func() bool { return cur.has(sAt) })
		} else if !down {
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("second %d at the restarted decider", sec), func() bool { return cur.count() >= sent })
		}
	}
	if compared < 30 {
		t.Fatalf("compared %d decisions after the restart, want at least 30", compared)
	}
	t.Logf("%d decisions after the restart equal the uninterrupted decider's", compared)
}
