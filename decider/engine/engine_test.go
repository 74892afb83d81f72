package engine

import (
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/lag"
)

var epoch = time.Unix(1700000000, 0)

func newEngine(t *testing.T) (*Engine, map[string]int) {
	t.Helper()
	drops := map[string]int{}
	return New(Config{
		KPA:          kpaconfig.Default(),
		Deployment:   kpaconfig.DefaultDeployment(),
		TickInterval: 2 * time.Second,
		OnDrop:       func(r string) { drops[r]++ },
	}), drops
}

var app = Target{Namespace: "default", Name: "app"}

func kpaSpec(ann map[string]string) Spec {
	return Spec{Target: app, Strategy: KPA, Annotations: ann, Reachable: true}
}

// load is the concurrency offered at second s of a scenario: idle, a ramp,
// a spike, a plateau, then quiet.
func load(s int) float64 {
	switch {
	case s < 20:
		return 0
	case s < 80:
		return float64(s-20) * 3
	case s < 100:
		return 900
	case s < 200:
		return 250
	default:
		return 20
	}
}

// world runs an engine through the scenario: one scraped sample per second
// at +500 ms, ready pods following the desired scale 4 s later, ticks every
// 100 ms. It returns every sample fed and, per KPA tick time, the desired scale.
type world struct {
	samples []Sample
	desired map[int64]int32
}

func runWorld(t *testing.T, e *Engine, from, to int, history []Sample, w *world) {
	t.Helper()
	ready := int32(1)
	var pendingReady []struct {
		at int
		n  int32
	}
	for _, s := range history {
		if _, err := e.Record(app, s, s.At); err != nil {
			t.Fatal(err)
		}
	}
	for ms := from * 1000; ms < to*1000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		sec := ms / 1000
		if ms%1000 == 500 {
			for len(pendingReady) > 0 && pendingReady[0].at <= sec {
				ready = pendingReady[0].n
				pendingReady = pendingReady[1:]
			}
			s := Sample{At: now, Stat: kpa.Stat{AverageConcurrentRequests: load(sec)}, ReadyPods: ready}
			w.samples = append(w.samples, s)
			if _, err := e.Record(app, s, now); err != nil {
				t.Fatalf("Record at %v: %v", now, err)
			}
		}
		for _, d := range e.Tick(now) {
			if d.Target != app {
				continue
			}
			pendingReady = append(pendingReady, struct {
				at int
				n  int32
			}{sec + 4, d.Desired})
		}
		if ms%2000 == 0 {
			d, _ := e.Get(app)
			w.desired[now.UnixMilli()] = d.Desired
		}
	}
}

func TestReplayReachesTheSameDecisions(t *testing.T) {
	const restart, end, retention = 230, 330, 120
	a, _ := newEngine(t)
	if err := a.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	wa := &world{desired: map[int64]int32{}}
	runWorld(t, a, 0, end, nil, wa)

	// A second decider starts at restart and is handed the last retention
	// seconds of history as a replay, then sees the same live samples.
	b, _ := newEngine(t)
	now := epoch.Add(restart * time.Second)
	if err := b.Upsert(kpaSpec(nil), now); err != nil {
		t.Fatal(err)
	}
	var hist []Sample
	for _, s := range wa.samples {
		if s.At.Before(now) && now.Sub(s.At) <= retention*time.Second {
			hist = append(hist, s)
		}
	}
	// The engine's grid is set by its first tick; tick once before the replay
	// as the service's loop does.
	b.Tick(now.Add(-100 * time.Millisecond))
	if err := b.Replay(app, hist, now); err != nil {
		t.Fatal(err)
	}
	var live []Sample
	for _, s := range wa.samples {
		if !s.At.Before(now) {
			live = append(live, s)
		}
	}
	wb := &world{desired: map[int64]int32{}}
	for ms := restart * 1000; ms < end*1000; ms += 100 {
		tnow := epoch.Add(time.Duration(ms) * time.Millisecond)
		for len(live) > 0 && !live[0].At.After(tnow) {
			if _, err := b.Record(app, live[0], tnow); err != nil {
				t.Fatal(err)
			}
			live = live[1:]
		}
		b.Tick(tnow)
		if ms%2000 == 0 {
			d, _ := b.Get(app)
			wb.desired[tnow.UnixMilli()] = d.Desired
		}
	}
	compared := 0
	for ms := restart * 1000; ms < end*1000; ms += 2000 {
		k := epoch.Add(time.Duration(ms) * time.Millisecond).UnixMilli()
		if wa.desired[k] != wb.desired[k] {
			t.Errorf("t=%ds: restarted decider desired %d, uninterrupted %d", ms/1000, wb.desired[k], wa.desired[k])
		}
		compared++
	}
	if compared == 0 {
		t.Fatal("compared no ticks")
	}
	// The scenario must have moved, or the comparison proves nothing.
	seen := map[int32]bool{}
	for _, d := range wa.desired {
		seen[d] = true
	}
	if len(seen) < 4 {
		t.Fatalf("scenario produced only %d distinct desired values", len(seen))
	}
}

func TestTicksOnTheAlignedGrid(t *testing.T) {
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	// A sample stamped after the grid tick must not be seen by that tick
	// even when it arrives before the tick runs.
	if _, err := e.Record(app, Sample{At: epoch.Add(1500 * time.Millisecond), Stat: kpa.Stat{AverageConcurrentRequests: 50}, ReadyPods: 1}, epoch.Add(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Record(app, Sample{At: epoch.Add(2050 * time.Millisecond), Stat: kpa.Stat{AverageConcurrentRequests: 5000}, ReadyPods: 1}, epoch.Add(2050*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	e.Tick(epoch.Add(1900 * time.Millisecond)) // sets the grid: tick at 0
	ds := e.Tick(epoch.Add(2080 * time.Millisecond))
	if len(ds) != 1 {
		t.Fatalf("Tick returned %d decisions, want 1", len(ds))
	}
	d := ds[0]
	if got, want := d.At, epoch.Add(2*time.Second); !got.Equal(want) {
		t.Errorf("decision At = %v, want the grid time %v", got, want)
	}
	if got, want := d.Sequence, uint64(epoch.Add(2*time.Second).UnixMilli()); got != want {
		t.Errorf("Sequence = %d, want %d (decision time in Unix ms)", got, want)
	}
	if d.KPA.ObservedStable != 50.0/60 && d.Desired != 1 {
		t.Errorf("tick at 2s saw observed stable %v, desired %d: the 2.05s sample leaked in", d.KPA.ObservedStable, d.Desired)
	}
	if d.KPA.ObservedPanic > 50 {
		t.Errorf("observed panic %v includes the sample stamped after the tick", d.KPA.ObservedPanic)
	}
}

func TestPokeFromZero(t *testing.T) {
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	// Drive the target to zero: 70 s without load.
	for ms := 0; ms <= 70000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if ms%1000 == 500 {
			if _, err := e.Record(app, Sample{At: now, ReadyPods: 1}, now); err != nil {
				t.Fatal(err)
			}
		}
		e.Tick(now)
	}
	if d, _ := e.Get(app); d.Desired != 0 {
		t.Fatalf("desired after 70 s idle = %d, want 0", d.Desired)
	}
	now := epoch.Add(70*time.Second + 300*time.Millisecond)
	poke, err := e.Record(app, Sample{At: now.Truncate(time.Second), Activator: true, Stat: kpa.Stat{AverageConcurrentRequests: 1, RequestCount: 1}, ReadyPods: -1}, now)
	if err != nil || !poke {
		t.Fatalf("activator stat at zero: poke %v, err %v; want a poke", poke, err)
	}
	d, informed, err := e.Poke(app, now)
	if err != nil || !informed || d.Desired < 1 {
		t.Fatalf("Poke = desired %d informed %v err %v; want at least 1, informed", d.Desired, informed, err)
	}
}

func TestBadInput(t *testing.T) {
	e, drops := newEngine(t)
	err := e.Upsert(kpaSpec(map[string]string{"autoscaling.knative.dev/target": "-3"}), epoch)
	if err == nil || !strings.Contains(err.Error(), "autoscaling.knative.dev/target") || !strings.Contains(err.Error(), "-3") {
		t.Errorf("bad target annotation: err = %v, want it to name the key and value", err)
	}
	d, _ := e.Get(app)
	if d.SpecError == "" || d.Desired != -1 {
		t.Errorf("target with a refused spec: %+v, want SpecError set and desired -1", d)
	}
	if err := e.Upsert(kpaSpec(map[string]string{"autoscaling.knative.dev/no-such-key": "1"}), epoch); err == nil {
		t.Error("unknown autoscaling.knative.dev key accepted")
	}
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatalf("good spec after bad ones: %v", err)
	}
	if d, _ := e.Get(app); d.SpecError != "" {
		t.Errorf("SpecError %q kept after a good spec", d.SpecError)
	}
	now := epoch.Add(time.Second)
	for _, s := range []Sample{
		{At: now, Stat: kpa.Stat{AverageConcurrentRequests: math.NaN()}, ReadyPods: -1},
		{At: now, Stat: kpa.Stat{AverageConcurrentRequests: -1}, ReadyPods: -1},
	} {
		if _, err := e.Record(app, s, now); err != nil {
			t.Fatal(err) // refused at the tick, not here
		}
	}
	if _, err := e.Record(app, Sample{At: now.Add(time.Hour), Stat: kpa.Stat{AverageConcurrentRequests: 1}, ReadyPods: -1}, now); err == nil {
		t.Error("sample an hour in the future accepted")
	}
	e.Tick(now.Add(2 * time.Second))
	if drops["bad_value"] != 2 || drops["future"] != 1 {
		t.Errorf("drops = %v, want 2 bad_value and 1 future", drops)
	}
	if _, err := e.Record(Target{Namespace: "x", Name: "y"}, Sample{At: now}, now); err == nil || drops["unknown_target"] != 1 {
		t.Errorf("sample for an unknown target: err %v, drops %v", err, drops)
	}
	if d, _ := e.Get(app); d.Desired < -1 {
		t.Errorf("desired %d below -1", d.Desired)
	}
}

func TestLagTargetHoldsOnMeasureError(t *testing.T) {
	e, _ := newEngine(t)
	fn := Target{Namespace: "default", Name: "fn"}
	if err := e.Upsert(Spec{Target: fn, Strategy: Lag, Annotations: map[string]string{"lag.tidal.dev/mode": "riff-queue"}}, epoch); err != nil {
		t.Fatal(err)
	}
	parts := []lag.Partition{{ID: 0, End: 500, Committed: 0, HasCommitted: true}, {ID: 1, End: 500, Committed: 0, HasCommitted: true}}
	var last int32
	for ms := 0; ms < 5000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if _, err := e.Record(fn, Sample{At: now, Partitions: parts, PartitionCount: 2, ReadyPods: last}, now); err != nil {
			t.Fatal(err)
		}
		e.Tick(now)
		d, _ := e.Get(fn)
		last = max(d.Desired, 0)
	}
	if last < 1 {
		t.Fatalf("backlog of 1000 over 2 partitions left the function at %d", last)
	}
	for ms := 5000; ms < 30000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if _, err := e.Record(fn, Sample{At: now, ReadyPods: -1, MeasureError: "broker unreachable"}, now); err != nil {
			t.Fatal(err)
		}
		e.Tick(now)
	}
	d, _ := e.Get(fn)
	if d.Desired != last {
		t.Errorf("after 25 s of broker errors desired = %d, want %d held", d.Desired, last)
	}
	if d.Lag == nil || d.Lag.Err == nil {
		t.Errorf("lag decision %+v does not carry the error", d.Lag)
	}
}

func TestMaxScaleBoundsWhatIsSent(t *testing.T) {
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(map[string]string{"autoscaling.knative.dev/max-scale": "3"}), epoch); err != nil {
		t.Fatal(err)
	}
	for ms := 0; ms <= 10000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if ms%1000 == 500 {
			if _, err := e.Record(app, Sample{At: now, Stat: kpa.Stat{AverageConcurrentRequests: 1000}, ReadyPods: 1}, now); err != nil {
				t.Fatal(err)
			}
		}
		e.Tick(now)
	}
	d, _ := e.Get(app)
	if d.Desired <= 3 {
		t.Fatalf("desired %d under heavy load, want the decider's unbounded value above 3", d.Desired)
	}
	if got := d.Bounded(); got != 3 {
		t.Errorf("Bounded() = %d, want max-scale 3", got)
	}
}

func TestSetReadyWithoutSamples(t *testing.T) {
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	if err := e.SetReady(app, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Record(app, Sample{At: epoch.Add(500 * time.Millisecond), Stat: kpa.Stat{AverageConcurrentRequests: 10}, ReadyPods: -1}, epoch.Add(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	e.Tick(epoch)
	e.Tick(epoch.Add(2 * time.Second))
	d, _ := e.Get(app)
	if d.KPA.ReadyPods != 4 {
		t.Errorf("decision saw %d ready pods, want the 4 set without a sample", d.KPA.ReadyPods)
	}
	if err := e.SetReady(app, -1); err == nil {
		t.Error("negative ready count accepted")
	}
	if err := e.SetReady(Target{Namespace: "x", Name: "y"}, 1); err == nil {
		t.Error("ready count for an unknown target accepted")
	}
}

// The collector sends a target's error once, when it begins: the engine
// keeps treating every tick as a failed fetch, and explains it, until a good
// sample ends it.
func TestMeasureErrorLastsUntilAGoodSample(t *testing.T) {
	e, _ := newEngine(t)
	fn := Target{Namespace: "default", Name: "fn"}
	if err := e.Upsert(Spec{Target: fn, Strategy: Lag}, epoch); err != nil {
		t.Fatal(err)
	}
	parts := []lag.Partition{{ID: 0, End: 100, Committed: 0, HasCommitted: true}}
	step := func(from, to int, s *Sample) {
		for ms := from; ms < to; ms += 100 {
			now := epoch.Add(time.Duration(ms) * time.Millisecond)
			if s != nil && ms == from {
				s.At = now
				if _, err := e.Record(fn, *s, now); err != nil {
					t.Fatal(err)
				}
			}
			e.Tick(now)
		}
	}
	step(0, 2000, &Sample{Partitions: parts, PartitionCount: 1, ReadyPods: 0})
	step(2000, 20000, &Sample{ReadyPods: -1, MeasureError: "kafka: dial tcp 127.0.0.1:9092: connection refused"})
	d, _ := e.Get(fn)
	if d.MeasureError == "" || !strings.Contains(d.MeasureError, "connection refused") {
		t.Errorf("MeasureError = %q 18 s into the outage, want the collector's error", d.MeasureError)
	}
	if d.Lag == nil || !errors.Is(d.Lag.Err, lag.ErrNoData) || strings.Contains(d.Lag.Err.Error(), "nothing observed") {
		t.Errorf("lag decision error = %v, want a failed fetch, not 'nothing observed'", d.Lag.Err)
	}
	if d.Desired < 1 {
		t.Errorf("desired %d during the outage, want the scale held (never zero on an error)", d.Desired)
	}
	step(20000, 21000, &Sample{Partitions: parts, PartitionCount: 1, ReadyPods: 1})
	if d, _ := e.Get(fn); d.MeasureError != "" {
		t.Errorf("MeasureError %q after a good sample, want it cleared", d.MeasureError)
	}
}

// A collector samples at the target's interval but not in phase with the
// tick loop: ticks between two samples decide on the latest fresh one.
func TestLagTicksBetweenSamplesUseTheLatest(t *testing.T) {
	e, _ := newEngine(t)
	fn := Target{Namespace: "default", Name: "fn"}
	if err := e.Upsert(Spec{Target: fn, Strategy: Lag}, epoch); err != nil {
		t.Fatal(err)
	}
	parts := []lag.Partition{{ID: 0, End: 100, Committed: 50, HasCommitted: true}, {ID: 1, End: 100, Committed: 50, HasCommitted: true}}
	noData := 0
	for ms := 0; ms < 5000; ms += 100 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if ms%200 == 0 { // every other tick, as a collector out of phase
			if _, err := e.Record(fn, Sample{At: now.Add(-30 * time.Millisecond), Partitions: parts, PartitionCount: 2, ReadyPods: 1}, now); err != nil {
				t.Fatal(err)
			}
		}
		e.Tick(now)
		if d, _ := e.Get(fn); ms > 0 && d.Lag != nil && errors.Is(d.Lag.Err, lag.ErrNoData) {
			noData++
		}
	}
	if noData > 0 {
		t.Errorf("%d ticks decided with no data while samples came every 200 ms", noData)
	}
	// Samples stop: after two intervals the target has no data.
	for ms := 5000; ms < 6000; ms += 100 {
		e.Tick(epoch.Add(time.Duration(ms) * time.Millisecond))
	}
	if d, _ := e.Get(fn); d.Lag == nil || !errors.Is(d.Lag.Err, lag.ErrNoData) {
		t.Errorf("1 s after the last sample: %v, want no data", d.Lag)
	}
}

// TestLateSampleWithinLatenessCountsAsInReplay: a sample stamped just
// before a grid time that reaches the decider after it is counted by that
// grid's decision, as a decider rebuilt from history counts it; without
// the wait the two would decide apart.
func TestLateSampleWithinLatenessCountsAsInReplay(t *testing.T) {
	cfg := Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second}
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	samples := []Sample{
		{At: at(1500), Stat: kpa.Stat{AverageConcurrentRequests: 7}, ReadyPods: 1},
		{At: at(3990), Stat: kpa.Stat{AverageConcurrentRequests: 70}, ReadyPods: 1}, // arrives at 4.3 s
	}
	tests := []struct {
		name     string
		lateness time.Duration
		// wantSame: the live decision at 4 s equals the replayed one.
		wantSame bool
	}{
		{"no wait: the tick at 4 s misses the late sample", 0, false},
		{"a 500 ms wait: it counts", 500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg.Lateness = tt.lateness
			live := New(cfg)
			if err := live.Upsert(kpaSpec(nil), at(0)); err != nil {
				t.Fatal(err)
			}
			var got *Decision
			for ms := 0; ms <= 5000; ms += 100 {
				now := at(ms)
				for _, s := range samples {
					arrives := s.At
					if s.At.Equal(at(3990)) {
						arrives = at(4300)
					}
					if arrives.Equal(now) {
						if _, err := live.Record(app, s, now); err != nil {
							t.Fatal(err)
						}
					}
				}
				live.Tick(now)
				if d, _ := live.Get(app); d.At.Equal(at(4000)) && got == nil {
					got = &d
				}
			}
			if got == nil {
				t.Fatal("no decision at 4 s")
			}

			// A decider rebuilt at 5 s from the same history.
			rebuilt := New(cfg)
			if err := rebuilt.Upsert(kpaSpec(nil), at(5000)); err != nil {
				t.Fatal(err)
			}
			if err := rebuilt.Replay(app, samples, at(5000)); err != nil {
				t.Fatal(err)
			}
			want, _ := rebuilt.Get(app)
			if !want.At.Equal(at(4000)) {
				t.Fatalf("rebuilt decision at %v, want 4 s", want.At)
			}
			if same := got.Desired == want.Desired && got.KPA.ObservedPanic == want.KPA.ObservedPanic; same != tt.wantSame {
				t.Errorf("live decision at 4 s: desired %d, panic %v; rebuilt: desired %d, panic %v; same = %v, want %v",
					got.Desired, got.KPA.ObservedPanic, want.Desired, want.KPA.ObservedPanic, same, tt.wantSame)
			}
		})
	}
}

// TestLateFirstSampleIsDecidedAtItsTick: a new target's first sample that
// reaches the engine after the tick it belongs to was made is decided at
// that tick at once, as it would have been had it come in time, not a tick
// later; once a target has a decision, late samples wait for the next tick.
func TestLateFirstSampleIsDecidedAtItsTick(t *testing.T) {
	cfg := Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second, Lateness: 500 * time.Millisecond}
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	type sent struct {
		sample  Sample
		arrives time.Time
	}
	// run feeds the samples as they arrive, ticking every 100 ms, and
	// returns each decision with the time it was reported.
	run := func(t *testing.T, samples []sent) (ds []Decision, when []time.Time) {
		e := New(cfg)
		if err := e.Upsert(kpaSpec(nil), at(0)); err != nil {
			t.Fatal(err)
		}
		for ms := 0; ms <= 7000; ms += 100 {
			now := at(ms)
			for _, s := range samples {
				if s.arrives.Equal(now) {
					if _, err := e.Record(app, s.sample, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, d := range e.Tick(now) {
				ds, when = append(ds, d), append(when, now)
			}
		}
		return ds, when
	}
	first := Sample{At: at(1900), Stat: kpa.Stat{AverageConcurrentRequests: 140}, ReadyPods: 1}
	onTime, _ := run(t, []sent{{first, at(2300)}})
	if len(onTime) == 0 || !onTime[0].At.Equal(at(2000)) {
		t.Fatalf("decisions on time %v, want the first at 2 s", onTime)
	}

	// The same sample, 200 ms after the tick at 2 s was made (at 2.5 s);
	// then a bigger one, late for the tick at 4 s.
	later := Sample{At: at(3900), Stat: kpa.Stat{AverageConcurrentRequests: 700}, ReadyPods: 2}
	ds, when := run(t, []sent{{first, at(2700)}, {later, at(4700)}})
	if len(ds) < 2 {
		t.Fatalf("decisions %v, want the late first one and the bigger one", ds)
	}
	if !ds[0].At.Equal(at(2000)) || !when[0].Equal(at(2700)) {
		t.Errorf("first decision made for %v, reported at %v; want for 2 s, at once (2.7 s)", ds[0].At, when[0])
	}
	if ds[0].Desired != onTime[0].Desired || ds[0].KPA.ObservedStable != onTime[0].KPA.ObservedStable {
		t.Errorf("late first decision: desired %d, stable %v; on time: %d, %v",
			ds[0].Desired, ds[0].KPA.ObservedStable, onTime[0].Desired, onTime[0].KPA.ObservedStable)
	}
	// A decided target's late sample counts at the next tick (6 s), like
	// any other's.
	if !ds[1].At.Equal(at(6000)) || !when[1].Equal(at(6500)) {
		t.Errorf("second decision made for %v, reported at %v; want for 6 s, at 6.5 s", ds[1].At, when[1])
	}
}

// TestReplayDoesNotStartInPanic: a live target is created before its ready
// count is known, so it never starts in Knative's restart panic; a target
// rebuilt from history whose first sample has several ready pods must not
// either, or it would hold that count for a stable window.
func TestReplayDoesNotStartInPanic(t *testing.T) {
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	var samples []Sample
	for s := 0; s < 30; s++ {
		samples = append(samples, Sample{At: at(s*1000 + 500), Stat: kpa.Stat{AverageConcurrentRequests: 7}, ReadyPods: 5})
	}
	live, _ := newEngine(t)
	if err := live.Upsert(kpaSpec(nil), at(0)); err != nil {
		t.Fatal(err)
	}
	liveAt := map[int64]int32{}
	for ms := 0; ms <= 30000; ms += 100 {
		now := at(ms)
		for _, s := range samples {
			if s.At.Equal(now) {
				if _, err := live.Record(app, s, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, d := range live.Tick(now) {
			liveAt[d.At.UnixMilli()] = d.Desired
		}
		if d, _ := live.Get(app); !d.At.IsZero() {
			liveAt[d.At.UnixMilli()] = d.Desired
		}
	}
	// Rebuilt at 12 s from all the history so far, then fed live.
	rebuilt, _ := newEngine(t)
	if err := rebuilt.Upsert(kpaSpec(nil), at(12000)); err != nil {
		t.Fatal(err)
	}
	rebuilt.Tick(at(11900))
	if err := rebuilt.Replay(app, samples[:12], at(12000)); err != nil {
		t.Fatal(err)
	}
	compared := 0
	for ms := 12000; ms <= 30000; ms += 100 {
		now := at(ms)
		for _, s := range samples[12:] {
			if s.At.Equal(now) {
				if _, err := rebuilt.Record(app, s, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		rebuilt.Tick(now)
		if d, _ := rebuilt.Get(app); ms%2000 == 0 && d.At.Equal(now) {
			compared++
			if want := liveAt[now.UnixMilli()]; d.Desired != want {
				t.Errorf("t=%.0fs: rebuilt desired %d (%s), live %d", now.Sub(epoch).Seconds(), d.Desired, d.Reason, want)
			}
		}
	}
	if compared == 0 {
		t.Fatal("compared no ticks")
	}
}

// TestKindsAreSeparateTargets: a Deployment and a StatefulSet of one name
// are two targets (they used to share the namespace/name key).
func TestKindsAreSeparateTargets(t *testing.T) {
	e, _ := newEngine(t)
	dep := Target{Namespace: "default", Name: "app"}
	sts := Target{Namespace: "default", Name: "app", APIVersion: "apps/v1", Kind: "StatefulSet"}
	for _, tg := range []Target{dep, sts} {
		if err := e.Upsert(Spec{Target: tg, Strategy: KPA, Reachable: true}, epoch); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.Len(); got != 2 {
		t.Fatalf("Len() = %d, want 2", got)
	}
	if dep.Key() == sts.Key() {
		t.Fatalf("keys collide: %q", dep.Key())
	}
	for s := range 6 {
		now := epoch.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
		if _, err := e.Record(dep, Sample{At: now, Stat: kpa.Stat{AverageConcurrentRequests: 700}, ReadyPods: 1}, now); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Record(sts, Sample{At: now, Stat: kpa.Stat{AverageConcurrentRequests: 7}, ReadyPods: 1}, now); err != nil {
			t.Fatal(err)
		}
	}
	e.Tick(epoch.Add(6 * time.Second))
	dd, _ := e.Get(dep)
	sd, _ := e.Get(sts)
	if dd.Desired != 10 || sd.Desired != 1 {
		t.Errorf("desired: Deployment %d (%s), StatefulSet %d (%s); want 10 and 1", dd.Desired, dd.Reason, sd.Desired, sd.Reason)
	}
	if !e.Remove(sts) || e.Len() != 1 {
		t.Errorf("Remove(StatefulSet): want the Deployment kept")
	}
	if _, ok := e.Get(dep); !ok {
		t.Error("the Deployment went with the StatefulSet")
	}
}

// TestReplayedTargetIsAnnounced: a decider rebuilt from history holds the
// decision it replayed to, so its next tick finds nothing changed; the
// actuator never heard that decision from it and must, or a restart in the
// middle of a scale-down leaves the target where the old decider left it.
func TestReplayedTargetIsAnnounced(t *testing.T) {
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	var samples []Sample
	for s := range 20 {
		samples = append(samples, Sample{At: at(s*1000 + 500), Stat: kpa.Stat{AverageConcurrentRequests: 7}, ReadyPods: 1})
	}
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(nil), at(12000)); err != nil {
		t.Fatal(err)
	}
	e.Tick(at(11900))
	if err := e.Replay(app, samples[:12], at(12000)); err != nil {
		t.Fatal(err)
	}
	before, _ := e.Get(app)
	var got []Decision
	for ms := 12000; ms <= 16000; ms += 100 {
		for _, s := range samples[12:] {
			if s.At.Equal(at(ms)) {
				if _, err := e.Record(app, s, at(ms)); err != nil {
					t.Fatal(err)
				}
			}
		}
		got = append(got, e.Tick(at(ms))...)
	}
	if len(got) != 1 {
		t.Fatalf("decisions after the replay = %d, want exactly 1 (announced once, then only changes)", len(got))
	}
	if got[0].Desired != before.Desired || got[0].Desired != 1 {
		t.Errorf("announced desired %d, want the replayed decision's %d (1)", got[0].Desired, before.Desired)
	}
}

// TestReadyChangeCountsAtItsTick: a change of ready pods stamped after a
// tick's grid time but arriving before the tick is made must not be seen by
// that tick, or a decider rebuilt from history (where the change sits at
// its time) decides differently from the live one. As a ReadyOnly sample it
// waits for its tick; applied at arrival (SetReady), it did not.
func TestReadyChangeCountsAtItsTick(t *testing.T) {
	cfg := Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second, Lateness: 500 * time.Millisecond}
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	ann := map[string]string{"autoscaling.knative.dev/target": "10"}
	first := Sample{At: at(100), ReadyPods: 1, ReadyOnly: true}
	measured := Sample{At: at(1500), Stat: kpa.Stat{AverageConcurrentRequests: 30}, ReadyPods: -1}
	change := Sample{At: at(2100), ReadyPods: 10, ReadyOnly: true} // arrives at 2.2 s, before the 2 s tick is made at 2.5 s
	tests := []struct {
		name     string
		asSample bool
		wantSame bool
	}{
		{"a change as a sample waits for its tick", true, true},
		{"a change applied at arrival leaks into the earlier tick", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := New(cfg)
			if err := live.Upsert(kpaSpec(ann), at(0)); err != nil {
				t.Fatal(err)
			}
			var got *Decision
			for ms := 0; ms <= 3000; ms += 100 {
				now := at(ms)
				switch ms {
				case 100:
					var err error
					if tt.asSample {
						_, err = live.Record(app, first, now)
					} else {
						err = live.SetReady(app, first.ReadyPods)
					}
					if err != nil {
						t.Fatal(err)
					}
				case 1500:
					if _, err := live.Record(app, measured, now); err != nil {
						t.Fatal(err)
					}
				case 2200:
					var err error
					if tt.asSample {
						_, err = live.Record(app, change, now)
					} else {
						err = live.SetReady(app, change.ReadyPods)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				live.Tick(now)
				if d, _ := live.Get(app); d.At.Equal(at(2000)) && got == nil {
					got = &d
				}
			}
			if got == nil {
				t.Fatal("no decision at 2 s")
			}
			rebuilt := New(cfg)
			if err := rebuilt.Upsert(kpaSpec(ann), at(2600)); err != nil {
				t.Fatal(err)
			}
			if err := rebuilt.Replay(app, []Sample{first, measured, change}, at(2600)); err != nil {
				t.Fatal(err)
			}
			want, _ := rebuilt.Get(app)
			if !want.At.Equal(at(2000)) {
				t.Fatalf("rebuilt decision at %v, want 2 s", want.At)
			}
			if !want.Panicking {
				t.Fatalf("rebuilt decision at 2 s not panicking (%s): the scenario needs 30 in flight on 1 pod to panic", want.Reason)
			}
			if same := got.Desired == want.Desired && got.Panicking == want.Panicking; same != tt.wantSame {
				t.Errorf("live decision at 2 s: %d, panicking %v (%s); rebuilt: %d, panicking %v (%s); same = %v, want %v",
					got.Desired, got.Panicking, got.Reason, want.Desired, want.Panicking, want.Reason, same, tt.wantSame)
			}
		})
	}
}

func TestMaxTargets(t *testing.T) {
	e := New(Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second, MaxTargets: 2})
	spec := func(name string) Spec {
		return Spec{Target: Target{Namespace: "ns", Name: name}, Strategy: KPA, Reachable: true}
	}
	for _, n := range []string{"a", "b"} {
		if err := e.Upsert(spec(n), epoch); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Upsert(spec("c"), epoch); !errors.Is(err, ErrTooManyTargets) {
		t.Fatalf("third target: %v, want ErrTooManyTargets", err)
	}
	// A held target's spec still changes, and a removal makes room.
	if err := e.Upsert(Spec{Target: Target{Namespace: "ns", Name: "a"}, Strategy: KPA, Annotations: map[string]string{"autoscaling.knative.dev/target": "5"}, Reachable: true}, epoch); err != nil {
		t.Errorf("spec change of a held target at the bound: %v", err)
	}
	e.Remove(Target{Namespace: "ns", Name: "b"})
	if err := e.Upsert(spec("c"), epoch); err != nil {
		t.Errorf("new target after a removal: %v", err)
	}
	if n := e.Len(); n != 2 {
		t.Errorf("engine holds %d targets, want 2", n)
	}
}

// TestSetKPAConfigAppliesToRunningTargets changes config-autoscaler under
// running targets, as a Knative operator's edit does: the next tick decides
// with it, keeping each target's history; a revision annotation still
// overrides the config; a target the new config makes invalid keeps its
// last good spec and shows the error.
func TestSetKPAConfigAppliesToRunningTargets(t *testing.T) {
	e, _ := newEngine(t)
	pinned := Target{Namespace: "default", Name: "pinned"}
	bounded := Target{Namespace: "default", Name: "bounded"}
	for _, s := range []Spec{
		kpaSpec(nil),
		{Target: pinned, Strategy: KPA, Reachable: true, Annotations: map[string]string{kpaconfig.Prefix + "target": "100"}},
		{Target: bounded, Strategy: KPA, Reachable: true, Annotations: map[string]string{kpaconfig.Prefix + "max-scale": "10"}},
	} {
		if err := e.Upsert(s, epoch); err != nil {
			t.Fatal(err)
		}
	}
	// 30 requests in flight at each target, one ready pod.
	var last map[Target]int32
	run := func(from, to int) {
		last = map[Target]int32{}
		for sec := from; sec < to; sec++ {
			now := epoch.Add(time.Duration(sec)*time.Second + 500*time.Millisecond)
			for _, ref := range []Target{app, pinned, bounded} {
				if _, err := e.Record(ref, Sample{At: now, Stat: kpa.Stat{AverageConcurrentRequests: 30}, ReadyPods: 1}, now); err != nil {
					t.Fatal(err)
				}
			}
			e.Tick(now.Add(600 * time.Millisecond))
		}
		for _, ref := range []Target{app, pinned, bounded} {
			d, _ := e.Get(ref)
			last[ref] = d.Desired
		}
	}
	run(0, 70)
	// Knative's default target: 100 × 70 % per pod.
	if last[app] != 1 || last[pinned] != 1 {
		t.Fatalf("before the edit: desired %v, want 1 each (30 / 70)", last)
	}

	cfg := kpaconfig.Default()
	cfg.ContainerConcurrencyTargetDefault = 10
	cfg.MaxScaleLimit = 5
	if changed, refused := e.SetKPAConfig(cfg, kpaconfig.DefaultDeployment(), epoch.Add(70*time.Second)); !changed || refused != 1 {
		t.Errorf("SetKPAConfig: changed %v, refused %d targets; want true, 1 (max-scale 10 above max-scale-limit 5)", changed, refused)
	}
	if changed, _ := e.SetKPAConfig(cfg, kpaconfig.DefaultDeployment(), epoch.Add(70*time.Second)); changed {
		t.Error("SetKPAConfig with the configuration in effect: changed, want unchanged")
	}
	run(70, 74)
	// ceil(30 / 7) = 5 within two ticks: the window kept its history.
	if last[app] != 5 {
		t.Errorf("after target 10: desired %d, want 5 within two ticks", last[app])
	}
	if last[pinned] != 1 {
		t.Errorf("the annotation's target 100 overrides the config: desired %d, want 1", last[pinned])
	}
	if d, _ := e.Get(bounded); !strings.Contains(d.SpecError, "max-scale") || d.Desired != 1 {
		t.Errorf("bounded: desired %d, spec error %q; want its last good spec's 1 and an error naming max-scale", d.Desired, d.SpecError)
	}
	if got, _ := e.KPAConfig(); got != cfg {
		t.Errorf("KPAConfig = %+v, want the new one", got)
	}
}

// TestTicksWaitForStalledSamples: a steady target's samples stop coming for
// a while and then come all at once, as when the collector or the stream
// stalls. Ticks made on time through the gap would read it as idle (one
// stable window after the last sample Knative's average is 0) and scale a
// loaded target towards zero; held (Config.Hold), they wait and see the
// samples. Samples that never come release the hold, and the ticks are made
// as they would have been on time.
func TestTicksWaitForStalledSamples(t *testing.T) {
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	never := math.MaxInt
	tests := []struct {
		name string
		hold time.Duration
		// Samples stamped from second stall on arrive at second until
		// (+200 ms); never: they do not arrive.
		stall, until int
		wantZero     bool
	}{
		{"held: the ticks wait for the late samples", 10 * time.Second, 21, 29, false},
		{"not held: the tick a window after the last sample reads 0", 0, 21, 29, true},
		{"samples that never come: after the hold, the ticks made as on time", 10 * time.Second, 21, never, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second,
				Lateness: 500 * time.Millisecond, Hold: tt.hold})
			if err := e.Upsert(kpaSpec(map[string]string{"autoscaling.knative.dev/window": "6s"}), at(0)); err != nil {
				t.Fatal(err)
			}
			// One pod at half its target (70) of concurrency: 1 pod.
			sample := func(sec int) Sample {
				return Sample{At: at(sec * 1000), Stat: kpa.Stat{AverageConcurrentRequests: 35}, ReadyPods: 1}
			}
			var zero []string
			for ms := 0; ms <= 45000; ms += 100 {
				now := at(ms)
				if ms%1000 == 200 {
					sec := ms / 1000
					var due []int
					switch {
					case sec < tt.stall:
						due = []int{sec}
					case tt.until != never && sec == tt.until:
						for s := tt.stall; s <= sec; s++ {
							due = append(due, s)
						}
					case tt.until != never && sec > tt.until:
						due = []int{sec}
					}
					for _, s := range due {
						if _, err := e.Record(app, sample(s), now); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, d := range e.Tick(now) {
					if d.Desired == 0 {
						zero = append(zero, d.Reason)
					}
				}
			}
			if got := len(zero) > 0; got != tt.wantZero {
				t.Errorf("decisions of 0: %q; want some: %v", zero, tt.wantZero)
			}
			if d, ok := e.Get(app); tt.until != never && (!ok || d.Desired != 1) {
				t.Errorf("decision at the end: %+v, want 1", d)
			}
			if b := e.Behind(at(45000)); b >= 2*time.Second {
				t.Errorf("ticks %v behind at the end, want less than a tick interval", b)
			}
		})
	}
}

// TestHoldIsBounded: samples stamped long before they arrive (a pusher's
// clock, a backlog) hold the ticks no more than Config.Hold behind.
func TestHoldIsBounded(t *testing.T) {
	hold := 5 * time.Second
	e := New(Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second,
		Lateness: 500 * time.Millisecond, Hold: hold})
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	for sec := 60; sec <= 120; sec++ {
		now := epoch.Add(time.Duration(sec) * time.Second)
		s := Sample{At: now.Add(-30 * time.Second), Stat: kpa.Stat{AverageConcurrentRequests: 5}, ReadyPods: 1}
		if _, err := e.Record(app, s, now); err != nil {
			t.Fatal(err)
		}
		e.Tick(now)
		if b := e.Behind(now); b > hold+2*time.Second {
			t.Fatalf("at %d s the ticks are %v behind, want at most the hold (%v) and a tick interval", sec, b, hold)
		}
	}
}

// TestTicksEarlyOnceSourcesComplete: a KPA tick waits Lateness for its
// samples unless every open source says its scrape samples up to the grid
// time are in; then it is made at the grid time, and decides as the late
// tick would.
func TestTicksEarlyOnceSourcesComplete(t *testing.T) {
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	// A scrape round starts at +300 ms each second and its sample arrives
	// at +350 ms; the collector says every sample before its clock is in
	// then and just after each whole second (+10 ms), as its hub does. The
	// loop turns at +50 ms every 100 ms, and at once when Ready says a tick
	// is complete. The load steps up at second 10.
	sample := func(sec int) Sample {
		c := 35.0
		if sec >= 10 {
			c = 350
		}
		return Sample{At: at(sec*1000 + 300), Stat: kpa.Stat{AverageConcurrentRequests: c}, ReadyPods: 1}
	}
	tests := []struct {
		name string
		// sources opened at the start; the first one says when it is
		// complete, the others (silent) never do; silentClosed of them,
		// from the second on, are closed at second 5.
		sources, silentClosed int
		wantLate              time.Duration
	}{
		{"no source: Lateness, at the loop's next turn", 0, 0, 550 * time.Millisecond},
		{"one source: once it says so", 1, 0, 10 * time.Millisecond},
		{"a silent source: Lateness", 2, 0, 550 * time.Millisecond},
		{"a silent source closed: once the other says so", 2, 1, 10 * time.Millisecond},
		{"one opened beyond those followed: Lateness", maxSources + 1, maxSources - 1, 550 * time.Millisecond},
	}
	var decided []map[int64]int32
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second, Lateness: 500 * time.Millisecond})
			if err := e.Upsert(kpaSpec(nil), at(0)); err != nil {
				t.Fatal(err)
			}
			var srcs []*Source
			for range tt.sources {
				srcs = append(srcs, e.OpenSource())
			}
			desired := map[int64]int32{}
			made := map[int64]time.Duration{} // grid time → how late it was made
			for ms := 0; ms <= 30000; ms += 10 {
				now := at(ms)
				if ms == 5000 && tt.silentClosed > 0 {
					for _, s := range srcs[1 : 1+tt.silentClosed] {
						s.Close()
					}
				}
				if ms%1000 == 350 {
					if _, err := e.Record(app, sample(ms/1000), now); err != nil {
						t.Fatal(err)
					}
				}
				if len(srcs) > 0 && (ms%1000 == 350 || ms%1000 == 10) {
					srcs[0].CompleteBefore(now)
				}
				before := e.lastKPA
				var ds []Decision
				select {
				case <-e.Ready():
					ds = e.TickKPA(now)
				default:
					if ms%100 == 50 {
						ds = e.Tick(now)
					}
				}
				for _, d := range ds {
					desired[d.At.UnixMilli()] = d.Desired
				}
				if e.lastKPA.After(before) && !before.IsZero() {
					made[e.lastKPA.UnixMilli()] = now.Sub(e.lastKPA)
				}
			}
			if len(made) < 13 {
				t.Fatalf("%d ticks made in 30 s after the first, want at least 13", len(made))
			}
			for g, late := range made {
				if g > at(6000).UnixMilli() && late != tt.wantLate {
					t.Errorf("tick at %v made %v after it, want %v", time.UnixMilli(g).Sub(epoch), late, tt.wantLate)
				}
			}
			if d, ok := e.Get(app); !ok || d.Desired != 5 {
				t.Errorf("decision at the end: %+v, want 5", d)
			}
			decided = append(decided, desired)
		})
	}
	for i := 1; i < len(decided); i++ {
		if !maps.Equal(decided[i], decided[0]) {
			t.Errorf("%s decided %v, want the same as %s: %v", tests[i].name, decided[i], tests[0].name, decided[0])
		}
	}
}
