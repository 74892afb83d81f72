package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/keepalive"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

var predictive = map[string]string{kpaconfig.AnnotationKeepAlive: kpaconfig.KeepAlivePredictiveValue}

// learned is the memory of a timer of period gap that ran n times, the
// last request at last.
func learned(n int, gap time.Duration, last time.Time) string {
	var s keepalive.State
	for i := n; i >= 0; i-- {
		s.Observe(last.Add(-time.Duration(i) * gap))
	}
	return s.Encode()
}

// timerWorld drives an engine through a timer's requests, one a period at
// second 0 of each, each busy for one second: every second a scrape of the
// ready pods (or, at zero, an activator stat that pokes); every 100 ms a
// tick; ready pods follow the reported desired scale after podStart. It
// records, per request, whether a pod was ready when it came, and the
// pod-seconds.
type timerWorld struct {
	e        *Engine
	period   time.Duration
	podStart time.Duration

	ready    int32
	pending  []readyAt
	desired  int32
	warmHits int
	cold     int
	podSecs  float64
	phases   map[keepalive.Phase]int
	reports  []Decision
}

type readyAt struct {
	at time.Time
	n  int32
}

func (w *timerWorld) run(t *testing.T, from, to time.Time) {
	t.Helper()
	if w.phases == nil {
		w.phases = map[keepalive.Phase]int{}
	}
	for now := from; now.Before(to); now = now.Add(100 * time.Millisecond) {
		for len(w.pending) > 0 && !w.pending[0].at.After(now) {
			w.ready = w.pending[0].n
			w.pending = w.pending[1:]
		}
		if now.Sub(from)%time.Second == 0 {
			w.podSecs += float64(w.ready)
			busy := now.Sub(epoch)%w.period < time.Second
			if busy && now.Sub(epoch)%w.period == 0 {
				if w.ready > 0 {
					w.warmHits++
				} else {
					w.cold++
				}
			}
			w.second(t, now, busy)
		}
		for _, d := range w.e.Tick(now) {
			w.apply(d, now)
		}
	}
}

func (w *timerWorld) second(t *testing.T, now time.Time, busy bool) {
	t.Helper()
	var st kpa.Stat
	if busy {
		st = kpa.Stat{AverageConcurrentRequests: 1, RequestCount: 1}
	}
	if w.ready == 0 {
		if !busy {
			return
		}
		poke, err := w.e.Record(app, Sample{At: now, Activator: true, ReadyPods: -1, Stat: st}, now)
		if err != nil {
			t.Fatal(err)
		}
		if poke {
			d, informed, err := w.e.Poke(app, now)
			if err != nil {
				t.Fatal(err)
			}
			if informed {
				w.apply(d, now)
			}
		}
		return
	}
	if _, err := w.e.Record(app, Sample{At: now, ReadyPods: w.ready, Stat: st}, now); err != nil {
		t.Fatal(err)
	}
}

func (w *timerWorld) apply(d Decision, now time.Time) {
	if d.Target != app || !d.Valid() {
		return
	}
	w.reports = append(w.reports, d)
	if d.KeepAlive != nil {
		w.phases[d.KeepAlive.Phase]++
	}
	w.desired = d.Desired
	w.pending = append(w.pending, readyAt{now.Add(w.podStart), d.Desired})
}

func TestKeepAlivePreWarmsATimer(t *testing.T) {
	const period = 10 * time.Minute
	e, _ := newEngine(t)
	spec := kpaSpec(predictive)
	spec.KeepAliveState = learned(20, period, epoch.Add(-period))
	if err := e.Upsert(spec, epoch.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	w := &timerWorld{e: e, period: period, podStart: 3 * time.Second}
	w.run(t, epoch.Add(-time.Second), epoch.Add(5*period))
	// The first request finds the target at zero after the learned gap's
	// window (it comes at the edge of the warm window); every later one is
	// pre-warmed.
	if w.cold > 1 || w.warmHits < 4 {
		t.Errorf("requests: %d cold, %d warm; want at most 1 cold, 4 warm", w.cold, w.warmHits)
	}
	// Warm for the window (8m6s to 11m after each request) and the
	// requests, at zero otherwise: well under Knative's 90 s after each
	// request, which would add up to five cold starts too.
	if max := 5 * (3*time.Minute + 30*time.Second).Seconds(); w.podSecs > max {
		t.Errorf("pod-seconds %.0f, want at most %.0f", w.podSecs, max)
	}
	for _, p := range []keepalive.Phase{keepalive.PhaseBusy, keepalive.PhaseUnloaded, keepalive.PhasePreWarm} {
		if w.phases[p] == 0 {
			t.Errorf("no decision in phase %s (phases %v)", p, w.phases)
		}
	}
	for _, d := range w.reports {
		if d.Desired == 0 && d.KeepAlive.Phase != keepalive.PhaseBusy && !d.PredictedIdle() {
			t.Errorf("decision %s: desired 0 in phase %s not marked predicted", d.Reason, d.KeepAlive.Phase)
		}
		if d.KeepAliveState == "" {
			t.Errorf("decision %s carries no keep-alive state", d.Reason)
		}
	}
	// The five new gaps (from the learned last request to the first, and
	// between the five) were learned.
	d, _ := e.Get(app)
	if got := d.KeepAlive.Prediction.Samples; got != 25 {
		t.Errorf("idle times held %d, want 25", got)
	}
}

func TestKeepAliveSurvivesARestart(t *testing.T) {
	const period = 10 * time.Minute
	a, _ := newEngine(t)
	spec := kpaSpec(predictive)
	spec.KeepAliveState = learned(20, period, epoch.Add(-period))
	if err := a.Upsert(spec, epoch.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	wa := &timerWorld{e: a, period: period, podStart: 3 * time.Second}
	wa.run(t, epoch.Add(-time.Second), epoch.Add(2*period+3*time.Minute))
	// A new decider gets the spec with the state the actuator stored from
	// the last reported decision, and no history (the target was idle).
	stored := wa.reports[len(wa.reports)-1].KeepAliveState
	b, _ := newEngine(t)
	restart := epoch.Add(2*period + 3*time.Minute)
	spec.KeepAliveState = stored
	if err := b.Upsert(spec, restart); err != nil {
		t.Fatal(err)
	}
	wb := &timerWorld{e: b, period: period, podStart: 3 * time.Second, ready: wa.ready, desired: wa.desired}
	wb.run(t, restart, epoch.Add(5*period))
	wa.run(t, restart, epoch.Add(5*period))
	if wb.cold != 0 || wb.warmHits != wa.warmHits-2 {
		t.Errorf("restarted: %d cold, %d warm; uninterrupted from the restart: %d warm", wb.cold, wb.warmHits, wa.warmHits-2)
	}
	da, _ := a.Get(app)
	db, _ := b.Get(app)
	if da.KeepAliveState != db.KeepAliveState || da.Desired != db.Desired {
		t.Errorf("restarted decider ends at %q desired %d, uninterrupted at %q desired %d", db.KeepAliveState, db.Desired, da.KeepAliveState, da.Desired)
	}
}

func TestKeepAliveStateFromTheSpec(t *testing.T) {
	now := epoch.Add(time.Hour)
	old := learned(20, 10*time.Minute, now.Add(-2*time.Minute))
	newer := learned(30, 10*time.Minute, now.Add(-time.Minute))
	for _, tc := range []struct {
		name    string
		states  []string // the spec's state, one Upsert each
		samples int
		drops   int
	}{
		{name: "none", states: []string{""}, samples: 0},
		{name: "seeded", states: []string{old}, samples: 20},
		{name: "a newer memory replaces", states: []string{old, newer}, samples: 30},
		{name: "an older one does not", states: []string{newer, old}, samples: 30},
		{name: "garbage starts afresh", states: []string{"!!"}, samples: 0, drops: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, drops := newEngine(t)
			for _, st := range tc.states {
				spec := kpaSpec(predictive)
				spec.KeepAliveState = st
				if err := e.Upsert(spec, now); err != nil {
					t.Fatal(err)
				}
			}
			d, _ := e.Get(app)
			if d.KeepAlive == nil {
				t.Fatal("no keep-alive decision")
			}
			if got := d.KeepAlive.Prediction.Samples; got != tc.samples {
				t.Errorf("idle times %d, want %d", got, tc.samples)
			}
			if drops["bad_keep_alive_state"] != tc.drops {
				t.Errorf("bad states counted %d, want %d", drops["bad_keep_alive_state"], tc.drops)
			}
		})
	}
}

func TestKeepAliveOffByDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  map[string]string
		ann  map[string]string
		on   bool
	}{
		{name: "no annotation", on: false},
		{name: "annotation", ann: predictive, on: true},
		{name: "cluster default", cfg: map[string]string{kpaconfig.KeyKeepAlive: "predictive"}, on: true},
		{name: "min-scale keeps precedence", ann: map[string]string{kpaconfig.AnnotationKeepAlive: "predictive", kpaconfig.AnnotationMinScale: "1"}, on: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kcfg, err := kpaconfig.ParseConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			e := New(Config{KPA: kcfg, Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
			spec := kpaSpec(tc.ann)
			spec.KeepAliveState = learned(20, 10*time.Minute, epoch)
			if err := e.Upsert(spec, epoch); err != nil {
				t.Fatal(err)
			}
			d, _ := e.Get(app)
			if on := d.KeepAlive != nil; on != tc.on {
				t.Errorf("keep-alive policy on: %v, want %v", on, tc.on)
			}
			if !tc.on && d.KeepAliveState != "" {
				t.Errorf("a target without the policy carries state %q", d.KeepAliveState)
			}
		})
	}
	// Turning the annotation off ends the policy.
	e, _ := newEngine(t)
	if err := e.Upsert(kpaSpec(predictive), epoch); err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(kpaSpec(nil), epoch); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Get(app); d.KeepAlive != nil {
		t.Error("the policy outlived its annotation")
	}
	if _, ok := e.NextKeepAlive(app); ok {
		t.Error("NextKeepAlive reports a time for a target without the policy")
	}
}

func TestKeepAliveReasons(t *testing.T) {
	e, _ := newEngine(t)
	spec := kpaSpec(predictive)
	spec.KeepAliveState = learned(3, 10*time.Minute, epoch)
	if err := e.Upsert(spec, epoch); err != nil {
		t.Fatal(err)
	}
	e.Tick(epoch.Add(time.Minute))
	d, _ := e.Get(app)
	if !strings.Contains(d.Reason, "keep-alive: fixed grace (3 idle times, want 10)") {
		t.Errorf("fallback reason %q, want Knative's with the fallback", d.Reason)
	}
	spec.KeepAliveState = learned(20, 10*time.Minute, epoch.Add(time.Second))
	if err := e.Upsert(spec, epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.Tick(epoch.Add(2 * time.Minute))
	d, _ = e.Get(app)
	if want := "keep-alive: zero, pre-warm at 9m (idle 1m59s; p5 10m, p99 11m)"; !strings.HasPrefix(d.Reason, want) {
		t.Errorf("reason %q, want it to start with %q", d.Reason, want)
	}
	if next, ok := e.NextKeepAlive(app); !ok || !next.Equal(epoch.Add(time.Second+9*time.Minute)) {
		t.Errorf("NextKeepAlive() = %v %v, want the pre-warm", next, ok)
	}
}
