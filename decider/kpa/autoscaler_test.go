package kpa

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/window"
)

var epoch = time.Unix(1700000000, 0)

func at(sec float64) time.Time { return epoch.Add(time.Duration(sec * float64(time.Second))) }

// testSpec is containerConcurrency 10 with the default config: target 7,
// total 10, TBC 0, 60 s and 6 s windows.
func testSpec() Spec {
	return Spec{
		ScalingMetric:       Concurrency,
		TargetValue:         7,
		TotalValue:          10,
		TargetBurstCapacity: 0,
		PanicThreshold:      2,
		MaxScaleUpRate:      1000,
		MaxScaleDownRate:    2,
		StableWindow:        60 * time.Second,
		InitialScale:        1,
		Reachable:           true,
		ActivatorCapacity:   100,
		MetricStableWindow:  60 * time.Second,
		MetricPanicWindow:   6 * time.Second,
		Aggregation:         window.Linear,
		Scraped:             true,
	}
}

func mustNew(t *testing.T, spec Spec, ready int32) *Autoscaler {
	t.Helper()
	a, err := New(spec, epoch, ready)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// load records a constant concurrency every second at +500 ms in [from, to).
func load(t *testing.T, a *Autoscaler, from, to int, c float64) {
	t.Helper()
	for s := from; s < to; s++ {
		if _, _, err := a.Record(at(float64(s)+0.5), at(float64(s)+0.5), Stat{AverageConcurrentRequests: c}, SourceScraper); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDecideMath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		spec          func(*Spec)
		ready         int32
		stable, panic float64
		wantDesired   int32
		wantEBC       int32
		wantPanicking bool
		wantReason    string
	}{
		{name: "steady: ceil(21/7) on 3 pods", ready: 3, stable: 21, panic: 21, wantDesired: 3, wantReason: "stable: concurrency 21 over 1m0s / target 7 → 3"},
		{name: "panic entry is inclusive: demand 2 on 1 pod", ready: 1, stable: 8, panic: 14, wantDesired: 2, wantPanicking: true},
		{name: "just under the threshold", ready: 1, stable: 7, panic: 7, wantDesired: 1},
		{name: "ready 0 counts as 1 for the rates", ready: 0, stable: 70000, panic: 0, wantDesired: 1000,
			wantReason: "max-scale-up-rate: 0 → 1000 (demand 10000 pods)"},
		{name: "scale-down floor", ready: 10, stable: 1, panic: 1, wantDesired: 5,
			wantReason: "max-scale-down-rate: 10 → 5 (demand 1 pods)"},
		{name: "unreachable has no floor", spec: func(s *Spec) { s.Reachable = false }, ready: 10, stable: 1, panic: 1, wantDesired: 1},
		{name: "1 → 0 allowed on one pod", ready: 1, stable: 0, panic: 0, wantDesired: 0},
		{name: "activation scale raises a non-zero demand", spec: func(s *Spec) { s.ActivationScale = 3 }, ready: 1, stable: 1, panic: 1, wantDesired: 3,
			wantReason: "activation-scale: 1 → 3"},
		{name: "activation scale leaves a raw zero", spec: func(s *Spec) { s.ActivationScale = 3 }, ready: 4, stable: 0, panic: 0, wantDesired: 2},
		{name: "EBC uses raw ready and panic", spec: func(s *Spec) { s.TargetBurstCapacity = 211; s.TotalValue = 100; s.TargetValue = 70 }, ready: 0, stable: 10, panic: 10, wantDesired: 1, wantEBC: -221},
		{name: "EBC -1 for TBC -1", spec: func(s *Spec) { s.TargetBurstCapacity = -1 }, ready: 2, stable: 7, panic: 7, wantDesired: 1, wantEBC: -1},
		{name: "negative averages never go below zero", ready: 1, stable: -50, panic: -50, wantDesired: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec()
			if tt.spec != nil {
				tt.spec(&spec)
			}
			a := mustNew(t, spec, 0)
			d := a.Decide(at(2), Inputs{ReadyPods: tt.ready, ObservedStable: tt.stable, ObservedPanic: tt.panic})
			if !d.Valid() {
				t.Fatalf("decision invalid: %v", d.Invalid)
			}
			if d.Desired != tt.wantDesired {
				t.Errorf("Desired = %d, want %d\n%s", d.Desired, tt.wantDesired, d.Explain())
			}
			if d.ExcessBurstCapacity != tt.wantEBC {
				t.Errorf("ExcessBurstCapacity = %d, want %d", d.ExcessBurstCapacity, tt.wantEBC)
			}
			if d.Panicking != tt.wantPanicking {
				t.Errorf("Panicking = %v, want %v", d.Panicking, tt.wantPanicking)
			}
			if tt.wantReason != "" && d.Reason() != tt.wantReason {
				t.Errorf("Reason = %q, want %q", d.Reason(), tt.wantReason)
			}
		})
	}
}

func TestPanicHoldAndExit(t *testing.T) {
	t.Parallel()
	a := mustNew(t, testSpec(), 1)
	// Spike: panic demand 12 on 1 pod.
	d := a.Decide(at(2), Inputs{ReadyPods: 1, ObservedStable: 10, ObservedPanic: 84})
	if !d.Panicking || d.Desired != 12 {
		t.Fatalf("spike: panicking %v desired %d, want panic at 12", d.Panicking, d.Desired)
	}
	if !d.PanicStart().Equal(at(2)) {
		t.Errorf("PanicStart = %v, want %v", d.PanicStart(), at(2))
	}
	// Demand drops: the result is held.
	d = a.Decide(at(4), Inputs{ReadyPods: 12, ObservedStable: 49, ObservedPanic: 49})
	if d.Desired != 12 {
		t.Errorf("held desired = %d, want 12", d.Desired)
	}
	if got, want := d.Reason(), "panic: desired held at 12, would be 7"; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	// Still panicking exactly one stable window after the last over tick.
	d = a.Decide(at(62), Inputs{ReadyPods: 12, ObservedStable: 49, ObservedPanic: 49})
	if !d.Panicking || d.Desired != 12 {
		t.Errorf("at +60 s: panicking %v desired %d, want still panicking at 12", d.Panicking, d.Desired)
	}
	// Strictly after: exit, and the rate floor applies.
	d = a.Decide(at(64), Inputs{ReadyPods: 12, ObservedStable: 49, ObservedPanic: 49})
	if d.Panicking || d.Desired != 7 || d.MaxPanicPods != 0 {
		t.Errorf("after exit: panicking %v desired %d maxPanicPods %d, want false, 7, 0", d.Panicking, d.Desired, d.MaxPanicPods)
	}
}

func TestStartInPanicAfterRestart(t *testing.T) {
	t.Parallel()
	a := mustNew(t, testSpec(), 5)
	d := a.Decide(at(2), Inputs{ReadyPods: 5, ObservedStable: 7, ObservedPanic: 7})
	if !d.Panicking || d.Desired != 5 {
		t.Errorf("restart with 5 pods: panicking %v desired %d, want panicking at 5", d.Panicking, d.Desired)
	}
	b := mustNew(t, testSpec(), 1)
	if d := b.Decide(at(2), Inputs{ReadyPods: 1, ObservedStable: 0, ObservedPanic: 0}); d.Panicking || d.Desired != 0 {
		t.Errorf("restart with 1 pod: panicking %v desired %d, want not panicking at 0", d.Panicking, d.Desired)
	}
}

func TestScaleDownDelay(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	spec.ScaleDownDelay = 6 * time.Second // 3 slots of 2 s
	a := mustNew(t, spec, 0)
	in := func(stable float64) Inputs { return Inputs{ReadyPods: 1, ObservedStable: stable, ObservedPanic: 0} }
	a.Decide(at(2), in(7)) // slot 1: 1
	a.Decide(at(4), in(0)) // slot 2: 0, held at 1
	d := a.Decide(at(6), in(0))
	if d.Desired != 1 {
		t.Errorf("within the delay: desired %d, want 1", d.Desired)
	}
	if d.Reason() != "scale-down-delay: desired held at 1, would be 0" {
		t.Errorf("Reason = %q", d.Reason())
	}
	if d := a.Decide(at(8), in(0)); d.Desired != 0 {
		t.Errorf("after the delay: desired %d, want 0", d.Desired)
	}
}

func TestStatusAndInformed(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	spec.TargetBurstCapacity = 5
	a := mustNew(t, spec, 1)
	if st := a.Status(); st.DesiredScale != ScaleUnknown || st.ExcessBurstCapacity != 5 {
		t.Fatalf("initial status = %+v, want -1 and 1×10−5", st)
	}
	// No data yet: invalid, status untouched.
	d, informed := a.Scale(at(2), 1, TriggerTick)
	if d.Valid() || informed || a.Status().DesiredScale != ScaleUnknown {
		t.Fatalf("no data: valid %v informed %v status %+v", d.Valid(), informed, a.Status())
	}
	if !strings.Contains(d.Reason(), "no data available") {
		t.Errorf("Reason = %q, want it to mention no data", d.Reason())
	}
	load(t, a, 2, 3, 7)
	d, informed = a.Scale(at(3), 1, TriggerTick)
	if !d.Valid() || !informed || a.Status().DesiredScale != 1 {
		t.Fatalf("first data: valid %v informed %v status %+v", d.Valid(), informed, a.Status())
	}
	// Same desired, EBC sign unchanged (10−5−7 = −2 → still negative).
	if _, informed = a.Scale(at(4), 1, TriggerTick); informed {
		t.Error("unchanged decision informed the reconciler")
	}
	// EBC sign flips with a second ready pod: 20−5−7 = 8.
	if _, informed = a.Scale(at(4), 2, TriggerTick); !informed {
		t.Error("EBC sign flip did not inform the reconciler")
	}
}

func TestNoDataIsNotReportedWithoutScrapeTarget(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	spec.TargetBurstCapacity = -1
	spec.Scraped = false
	a := mustNew(t, spec, 0)
	d, _ := a.Scale(at(2), 0, TriggerTick)
	if !d.Valid() || d.Desired != 0 {
		t.Errorf("TBC -1 with no data: valid %v desired %d, want a valid 0", d.Valid(), d.Desired)
	}
}

func TestPokeRule(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	spec.TargetBurstCapacity = -1
	spec.Scraped = false
	a := mustNew(t, spec, 0)
	one := Stat{AverageConcurrentRequests: 1, RequestCount: 1}
	// Status -1: no poke.
	if poke, _, _ := a.Record(at(1), at(1.2), one, SourceActivator); poke {
		t.Error("poke at status -1")
	}
	a.Scale(at(200), 0, TriggerTick) // window empty by now: desired 0
	if a.Status().DesiredScale != 0 {
		t.Fatalf("desired = %d, want 0", a.Status().DesiredScale)
	}
	if poke, _, _ := a.Record(at(200), at(200.2), one, SourceScraper); poke {
		t.Error("a scraped stat poked")
	}
	if poke, _, _ := a.Record(at(200), at(200.2), Stat{RequestCount: 3}, SourceActivator); poke {
		t.Error("an activator stat with zero concurrency poked")
	}
	poke, _, _ := a.Record(at(200), at(200.2), one, SourceActivator)
	if !poke {
		t.Fatal("activator stat at desired 0 did not poke")
	}
	d, informed := a.Scale(at(200.2), 0, TriggerPoke)
	if d.Desired != 1 || !informed || d.Trigger != TriggerPoke {
		t.Errorf("poke: desired %d informed %v trigger %v, want 1, true, poke", d.Desired, informed, d.Trigger)
	}
}

func TestRecordRefusesBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stat   Stat
		at     time.Time
		reason DropReason
		field  string
	}{
		{"NaN", Stat{AverageConcurrentRequests: math.NaN()}, at(10), DropBadValue, "average_concurrent_requests"},
		{"+Inf", Stat{RequestCount: math.Inf(1)}, at(10), DropBadValue, "request_count"},
		{"-Inf", Stat{ProxiedRequestCount: math.Inf(-1)}, at(10), DropBadValue, "proxied_request_count"},
		{"negative", Stat{AverageProxiedConcurrentRequests: -1}, at(10), DropBadValue, "average_proxied_concurrent_requests"},
		{"absurdly large", Stat{AverageConcurrentRequests: 1e300}, at(10), DropBadValue, "average_concurrent_requests"},
		{"far future", Stat{AverageConcurrentRequests: 1}, at(10).Add(time.Hour), DropFuture, "timestamp"},
		{"far past", Stat{AverageConcurrentRequests: 1}, at(10).Add(-time.Hour), DropTooOld, "timestamp"},
		{"a window old", Stat{AverageConcurrentRequests: 1}, at(10).Add(-60 * time.Second), DropTooOld, "timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, testSpec(), 0)
			_, reason, err := a.Record(tt.at, at(10), tt.stat, SourceScraper)
			if err == nil || reason != tt.reason {
				t.Fatalf("Record = %v, %v; want %v and an error", reason, err, tt.reason)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %s", err, tt.field)
			}
			if !a.stable.IsEmpty(at(10)) {
				t.Error("a refused stat reached the window")
			}
		})
	}
	a := mustNew(t, testSpec(), 0)
	if _, reason, err := a.Record(at(10).Add(-59*time.Second), at(10), Stat{AverageConcurrentRequests: 1}, SourceScraper); err != nil || reason != Kept {
		t.Errorf("replayed history inside the window refused: %v %v", reason, err)
	}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*Spec)
		field string
	}{
		{"zero target", func(s *Spec) { s.TargetValue = 0 }, "target_value"},
		{"negative target", func(s *Spec) { s.TargetValue = -7 }, "target_value"},
		{"NaN target", func(s *Spec) { s.TargetValue = math.NaN() }, "target_value"},
		{"zero total", func(s *Spec) { s.TotalValue = 0 }, "total_value"},
		{"TBC -2", func(s *Spec) { s.TargetBurstCapacity = -2 }, "target_burst_capacity"},
		{"scale-up rate 1", func(s *Spec) { s.MaxScaleUpRate = 1 }, "max_scale_up_rate"},
		{"scale-down rate 0.5", func(s *Spec) { s.MaxScaleDownRate = 0.5 }, "max_scale_down_rate"},
		{"panic threshold 0", func(s *Spec) { s.PanicThreshold = 0 }, "panic_threshold"},
		{"window 0", func(s *Spec) { s.MetricStableWindow = 0 }, "metric_stable_window"},
		{"delay 2h", func(s *Spec) { s.ScaleDownDelay = 2 * time.Hour }, "scale_down_delay"},
		{"metric 7", func(s *Spec) { s.ScalingMetric = 7 }, "scaling_metric"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.edit(&s)
			_, err := New(s, epoch, 0)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("New = %v, want an error naming %s", err, tt.field)
			}
		})
	}
	if _, err := New(testSpec(), epoch, -1); err == nil {
		t.Error("New with -1 ready pods succeeded")
	}
}

// TestNeverNegative drives the decider with hostile but accepted inputs and
// checks that it never panics or reports a negative scale other than -1.
func TestNeverNegative(t *testing.T) {
	t.Parallel()
	values := []float64{0, 1e-300, 0.5, 7, 1e6, MaxStatValue}
	readies := []int32{0, 1, 3, math.MaxInt32}
	for _, algo := range []window.Algorithm{window.Linear, window.WeightedExponential} {
		for _, metric := range []Metric{Concurrency, RPS} {
			spec := testSpec()
			spec.Aggregation, spec.ScalingMetric = algo, metric
			spec.TargetBurstCapacity = 211
			spec.ScaleDownDelay = 10 * time.Second
			spec.ActivationScale = 2
			a := mustNew(t, spec, 3)
			for i := range 400 {
				now := at(float64(i) / 3)
				v := values[i%len(values)]
				st := Stat{AverageConcurrentRequests: v, AverageProxiedConcurrentRequests: values[(i/2)%len(values)], RequestCount: v}
				_, _, _ = a.Record(now, now, st, Source(i%2))
				if i%5 == 0 {
					d, _ := a.Scale(now, readies[i%len(readies)], TriggerTick)
					if d.Desired < 0 || a.Status().DesiredScale < ScaleUnknown {
						t.Fatalf("desired %d status %+v\n%s", d.Desired, a.Status(), d.Explain())
					}
				}
			}
		}
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	s := NewSet()
	k1, k2 := Key{Namespace: "ns", Name: "a"}, Key{Namespace: "ns", Name: "b"}
	for _, k := range []Key{k1, k2} {
		if err := s.Create(k, testSpec(), at(0), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(Key{Name: "a"}, testSpec(), at(0), 1); err == nil {
		t.Error("Create without a namespace succeeded")
	}
	if err := s.Create(k1, testSpec(), at(0), 1); !errors.Is(err, ErrTargetExists) {
		t.Errorf("duplicate Create = %v, want ErrTargetExists", err)
	}
	if _, reason, err := s.Record(Key{Namespace: "ns", Name: "zz"}, at(1), at(1), Stat{}, SourceScraper); !errors.Is(err, ErrUnknownTarget) || reason != DropUnknownTarget {
		t.Errorf("Record to an unknown target = %v %v", reason, err)
	}
	if _, _, err := s.Record(k1, at(1), at(1), Stat{AverageConcurrentRequests: 21}, SourceScraper); err != nil {
		t.Fatal(err)
	}
	changed := s.Tick(at(2), nil)
	if len(changed) != 1 || changed[0].Key != k1 || changed[0].Status.DesiredScale != 3 {
		t.Fatalf("Tick changed = %+v, want only %v at 3", changed, k1)
	}
	d, st, ok := s.Get(k1)
	if !ok || d.Desired != 3 || st.DesiredScale != 3 || !d.Panicking {
		t.Errorf("Get = %+v %+v %v", d, st, ok)
	}
	if _, st, _ := s.Get(k2); st.DesiredScale != ScaleUnknown {
		t.Errorf("target without data: status %+v, want -1", st)
	}
	if text := d.Explain(); !strings.Contains(text, "panicking since") {
		t.Errorf("Explain = %q", text)
	}
	if s.Len() != 2 {
		t.Errorf("Len() = %d, want 2", s.Len())
	}
	if err := s.SetReady(k1, -1); err == nil {
		t.Error("SetReady(-1) succeeded")
	}
	if !s.Delete(k1) || s.Delete(k1) || s.Len() != 1 {
		t.Error("Delete did not remove exactly one target")
	}
	if _, _, ok := s.Get(k2); !ok {
		t.Error("Delete lost the other target")
	}
	spec := testSpec()
	spec.MetricStableWindow = 30 * time.Second
	if err := s.Update(k2, spec, at(3)); err != nil {
		t.Fatal(err)
	}
	spec.TargetValue = 0
	if err := s.Update(k2, spec, at(3)); err == nil {
		t.Error("Update to target 0 succeeded")
	}
}

func TestZeroAllocations(t *testing.T) {
	s := NewSet()
	k := Key{Namespace: "ns", Name: "a"}
	if err := s.Create(k, testSpec(), at(0), 5); err != nil {
		t.Fatal(err)
	}
	sec := 0.0
	if n := testing.AllocsPerRun(1000, func() {
		sec++
		_, _, _ = s.Record(k, at(sec), at(sec), Stat{AverageConcurrentRequests: 300}, SourceScraper)
	}); n != 0 {
		t.Errorf("Record allocates %v times, want 0", n)
	}
	a := mustNew(t, testSpec(), 5)
	load(t, a, 0, 180, 35)
	if n := testing.AllocsPerRun(1000, func() { a.Scale(at(181), 5, TriggerTick) }); n != 0 {
		t.Errorf("Scale allocates %v times, want 0", n)
	}
	buf := make([]Change, 0, 4)
	if n := testing.AllocsPerRun(100, func() { buf = s.Tick(at(sec), buf[:0]) }); n != 0 {
		t.Errorf("Tick allocates %v times, want 0", n)
	}
}
