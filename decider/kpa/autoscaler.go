package kpa

import (
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/decider/window"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// Autoscaler is the state of one target: its four averaging windows
// (concurrency and RPS, stable and panic; a window.Window holds both
// metrics, recorded together), its panic state, its
// scale-down-delay window and its decider status. It is Knative's
// autoscaler and its MultiScaler runner in one value, without the goroutine.
//
// An Autoscaler is not safe for concurrent use; Set serialises access.
//
// The fields a Record writes come first, so that recording touches few
// cache lines of a target that has left the cache since its last tick.
type Autoscaler struct {
	// stable and panic hold concurrency as their first series (seriesConc)
	// and requests as their second (seriesRPS).
	stable, panic window.Window
	// ready is the ready pod count the shell last reported (Set only).
	ready int32

	spec Spec

	// panicLastOver is the last tick over the panic threshold (Knative's
	// panicTime) and panicStart when the current panic began, both in Unix
	// nanoseconds and meaningful only while panicking.
	panicLastOver int64
	panicStart    int64
	maxPanicPods  int32
	panicking     bool

	// delay is nil unless ScaleDownDelay was > 0 at creation; like Knative's
	// it is neither created nor resized by a later Update.
	delay *delayWindow

	status Status
}

// New returns the state for a target created at now with ready pods ready.
// Created with more than one ready pod, it starts in panic mode holding that
// count for one stable window, so that a restart does not scale down before
// data arrives (spec §4.4).
func New(spec Spec, now time.Time, ready int32) (*Autoscaler, error) {
	a := &Autoscaler{}
	if err := a.init(spec, now, ready); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Autoscaler) init(spec Spec, now time.Time, ready int32) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if ready < 0 {
		return fmt.Errorf("ready pods %d: want ≥ 0", ready)
	}
	*a = Autoscaler{spec: spec, ready: ready}
	if err := a.stable.Init(spec.MetricStableWindow, spec.Aggregation, nil); err != nil {
		return err
	}
	if err := a.panic.Init(spec.MetricPanicWindow, spec.Aggregation, nil); err != nil {
		return err
	}
	a.maxPanicPods = ready
	if ready > 1 {
		a.panicking = true
		a.panicStart = now.UnixNano()
		a.panicLastOver = a.panicStart
	}
	if spec.ScaleDownDelay > 0 {
		a.delay = newDelayWindow(spec.ScaleDownDelay)
	}
	a.status = Status{DesiredScale: ScaleUnknown, ExcessBurstCapacity: spec.InitialExcessBurstCapacity()}
	return nil
}

// Spec returns the target's current spec.
func (a *Autoscaler) Spec() Spec { return a.spec }

// Status returns the target's decider status.
func (a *Autoscaler) Status() Status { return a.status }

// Update replaces the spec, keeping the metric history, the panic state and
// the status. Windows whose length or algorithm changed are resized at now,
// keeping their newest data.
func (a *Autoscaler) Update(spec Spec, now time.Time) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	old := a.spec
	if spec.MetricStableWindow != old.MetricStableWindow || spec.Aggregation != old.Aggregation {
		if err := a.stable.Resize(spec.MetricStableWindow, spec.Aggregation, now); err != nil {
			return err
		}
	}
	if spec.MetricPanicWindow != old.MetricPanicWindow || spec.Aggregation != old.Aggregation {
		if err := a.panic.Resize(spec.MetricPanicWindow, spec.Aggregation, now); err != nil {
			return err
		}
	}
	a.spec = spec
	return nil
}

// record adds an already validated stat at second at. Proxied requests are
// subtracted first, since the activator reports them itself (spec §2.4).
func (a *Autoscaler) record(at time.Time, s Stat) {
	c := s.AverageConcurrentRequests - s.AverageProxiedConcurrentRequests
	r := s.RequestCount - s.ProxiedRequestCount
	sec := at.Unix()
	a.stable.RecordSecond(sec, c, r)
	a.panic.RecordSecond(sec, c, r)
}

// The windows' series.
const (
	seriesConc = window.First
	seriesRPS  = window.Second
)

// Observe reads the scaling metric's (stable, panic) averages at now; ok is
// false for "no data": the stable window is empty and a scrape target exists.
func (a *Autoscaler) Observe(now time.Time) (stable, panic float64, ok bool) {
	k := seriesConc
	if a.spec.ScalingMetric == RPS {
		k = seriesRPS
	}
	// Both series of a window are written at the same times, so they are
	// empty together.
	if a.stable.IsEmpty(now) && a.spec.Scraped {
		return 0, 0, false
	}
	return a.stable.Average(now, k), a.panic.Average(now, k), true
}

// Scale makes one decision at now with ready pods ready, reading the windows,
// and updates the panic state, the delay window and the status. It reports
// whether the status changed in a way the reconciler must hear about: the
// desired scale changed, or the sign of the excess burst capacity flipped.
func (a *Autoscaler) Scale(now time.Time, ready int32, trigger Trigger) (d Decision, informed bool) {
	informed = a.scaleInto(now, ready, trigger, &d)
	return d, informed
}

func (a *Autoscaler) scaleInto(now time.Time, ready int32, trigger Trigger, d *Decision) bool {
	stable, panic, ok := a.Observe(now)
	a.decide(now, Inputs{ReadyPods: ready, ObservedStable: stable, ObservedPanic: panic, NoData: !ok}, d)
	d.Trigger = trigger
	if !d.Valid() {
		return false
	}
	return a.apply(d)
}

// apply stores a valid decision in the status (Knative's updateLatestScale).
func (a *Autoscaler) apply(d *Decision) bool {
	informed := a.status.DesiredScale != d.Desired ||
		(a.status.ExcessBurstCapacity < 0) != (d.ExcessBurstCapacity < 0)
	a.status = Status{DesiredScale: d.Desired, ExcessBurstCapacity: d.ExcessBurstCapacity}
	return informed
}

// Inputs are the observations one decision is made from.
type Inputs struct {
	// ReadyPods is the number of ready pods; negative counts as 0.
	ReadyPods int32
	// ObservedStable and ObservedPanic are the scaling metric's averages over
	// the stable and panic windows.
	ObservedStable float64
	ObservedPanic  float64
	// NoData marks an empty stable window: the decision is invalid.
	NoData bool
}

// Decide is the decision math of spec §4.2 on the given observations. It
// updates the panic state and the scale-down-delay window, but not the
// status. An invalid decision (no data, or an observation that is NaN or
// infinite) changes nothing.
func (a *Autoscaler) Decide(now time.Time, in Inputs) Decision {
	var d Decision
	a.decide(now, in, &d)
	return d
}

func (a *Autoscaler) decide(now time.Time, in Inputs, d *Decision) {
	spec := &a.spec
	ready := max(in.ReadyPods, 0)
	*d = Decision{
		At:                  now,
		Metric:              spec.ScalingMetric,
		ReadyPods:           ready,
		StableWindow:        spec.MetricStableWindow,
		PanicWindow:         spec.MetricPanicWindow,
		TargetValue:         spec.TargetValue,
		TotalValue:          spec.TotalValue,
		PanicThreshold:      spec.PanicThreshold,
		TargetBurstCapacity: spec.TargetBurstCapacity,
	}
	if in.NoData || !sane(in.ObservedStable) || !sane(in.ObservedPanic) {
		d.Invalid = NoData
		a.fillPanic(d)
		return
	}
	d.ObservedStable, d.ObservedPanic = in.ObservedStable, in.ObservedPanic

	// Zero ready pods count as one for the rates and the panic test.
	readyF := math.Max(1, float64(ready))
	d.MaxScaleUp = math.Ceil(spec.MaxScaleUpRate * readyF)
	if spec.Reachable {
		d.MaxScaleDown = math.Floor(readyF / spec.MaxScaleDownRate)
	}
	d.RawStable = math.Ceil(in.ObservedStable / spec.TargetValue)
	d.RawPanic = math.Ceil(in.ObservedPanic / spec.TargetValue)

	var stableClamps, panicClamps clampBuf
	d.DesiredStable = a.bound(d, d.RawStable, SeriesStable, &stableClamps)
	d.DesiredPanic = a.bound(d, d.RawPanic, SeriesPanic, &panicClamps)
	for _, c := range stableClamps.c[:stableClamps.n] {
		d.addClamp(c)
	}

	// The panic test uses the raw demand and is inclusive.
	d.OverThreshold = d.RawPanic/readyF >= spec.PanicThreshold
	nowNs := now.UnixNano()
	switch {
	case d.OverThreshold:
		if !a.panicking {
			a.panicking = true
			a.panicStart = nowNs
		}
		a.panicLastOver = nowNs
	case a.panicking && a.panicLastOver+int64(spec.StableWindow) < nowNs:
		// The surge has been in the stable window for a whole window.
		a.panicking = false
		a.panicLastOver, a.panicStart = 0, 0
		a.maxPanicPods = 0
	}

	desired := d.DesiredStable
	if a.panicking {
		for _, c := range panicClamps.c[:panicClamps.n] {
			d.addClamp(c)
		}
		if d.DesiredPanic > desired {
			d.addClamp(Clamp{Kind: ClampPanicWindow, Series: SeriesDesired, Before: float64(desired), After: d.DesiredPanic})
			desired = d.DesiredPanic
		}
		// No scale-down while panicking.
		if desired > a.maxPanicPods {
			a.maxPanicPods = desired
		} else if desired < a.maxPanicPods {
			d.addClamp(Clamp{Kind: ClampPanicHold, Series: SeriesDesired, Before: float64(desired), After: a.maxPanicPods})
		}
		desired = a.maxPanicPods
	}

	if a.delay != nil && spec.Reachable {
		held := a.delay.record(now, desired)
		if held != desired {
			d.addClamp(Clamp{Kind: ClampScaleDownDelay, Series: SeriesDesired, Before: float64(desired), After: held})
		}
		desired = held
	}
	d.Desired = desired

	switch {
	case spec.TargetBurstCapacity == 0:
		d.ExcessBurstCapacity = 0
	case spec.TargetBurstCapacity > 0:
		// The raw ready count, not readyF, and the panic observation.
		d.ExcessBurstCapacity = kpaspec.SaturateInt32(math.Floor(float64(ready)*spec.TotalValue - spec.TargetBurstCapacity - in.ObservedPanic))
	default:
		d.ExcessBurstCapacity = -1
	}
	a.fillPanic(d)
}

// bound applies the rate clamps and the activation scale to a raw demand,
// reporting each clamp that changed it.
func (a *Autoscaler) bound(d *Decision, raw float64, s Series, report *clampBuf) int32 {
	v := raw
	if v < d.MaxScaleDown {
		report.add(Clamp{Kind: ClampMaxScaleDownRate, Series: s, Before: v, After: int32(d.MaxScaleDown)})
		v = d.MaxScaleDown
	}
	if v > d.MaxScaleUp {
		report.add(Clamp{Kind: ClampMaxScaleUpRate, Series: s, Before: v, After: kpaspec.SaturateInt32(d.MaxScaleUp)})
		v = d.MaxScaleUp
	}
	n := kpaspec.SaturateInt32(v)
	// Activation scale applies after the rate clamps, and only to a non-zero
	// raw demand.
	if as := a.spec.ActivationScale; as > 1 && raw > 0 && as > n {
		report.add(Clamp{Kind: ClampActivationScale, Series: s, Before: float64(n), After: as})
		n = as
	}
	return n
}

// clampBuf collects the clamps of one series without allocating.
type clampBuf struct {
	c [3]Clamp
	n int
}

func (b *clampBuf) add(c Clamp) {
	b.c[b.n] = c
	b.n++
}

func (a *Autoscaler) fillPanic(d *Decision) {
	d.Panicking = a.panicking
	d.MaxPanicPods = a.maxPanicPods
	if a.panicking {
		d.PanicStartUnixNano = a.panicStart
		d.PanicLastOverUnixNano = a.panicLastOver
	}
}

// sane reports whether an observation is a finite number. Negative averages
// (proxied load above the total) are kept, as Knative keeps them: the rate
// floor keeps the desired scale at zero or above.
func sane(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
