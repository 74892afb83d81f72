package kpa

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Trigger says why a decision was made.
type Trigger uint8

const (
	// TriggerTick is the regular 2 s tick.
	TriggerTick Trigger = iota
	// TriggerPoke is an out-of-band decision after an activator stat arrived
	// while the desired scale was 0.
	TriggerPoke
)

func (t Trigger) String() string {
	if t == TriggerPoke {
		return "poke"
	}
	return "tick"
}

// Invalid says why a decision is not valid; the zero value means it is.
type Invalid uint8

const (
	// Valid marks a valid decision.
	Valid Invalid = iota
	// NoData means the stable window of the scaling metric was empty for
	// longer than its length while a scrape target exists (Knative's
	// ErrNoData). It is the normal state of a target without traffic data.
	NoData
)

func (r Invalid) String() string {
	switch r {
	case Valid:
		return "valid"
	case NoData:
		return "no data available"
	default:
		return fmt.Sprintf("Invalid(%d)", uint8(r))
	}
}

// ClampKind names a rule that changed the desired scale.
type ClampKind uint8

const (
	// ClampMaxScaleDownRate raised the demand to ⌊ready / max-scale-down-rate⌋.
	ClampMaxScaleDownRate ClampKind = iota + 1
	// ClampMaxScaleUpRate lowered the demand to ⌈ready × max-scale-up-rate⌉.
	ClampMaxScaleUpRate
	// ClampActivationScale raised a non-zero demand to the activation scale.
	ClampActivationScale
	// ClampPanicWindow raised the stable count to the panic window's count.
	ClampPanicWindow
	// ClampPanicHold kept the desired scale at the panic high-water mark.
	ClampPanicHold
	// ClampScaleDownDelay kept the maximum of the scale-down-delay window.
	ClampScaleDownDelay
)

func (k ClampKind) String() string {
	switch k {
	case ClampMaxScaleDownRate:
		return "max-scale-down-rate"
	case ClampMaxScaleUpRate:
		return "max-scale-up-rate"
	case ClampActivationScale:
		return "activation-scale"
	case ClampPanicWindow:
		return "panic-window"
	case ClampPanicHold:
		return "panic"
	case ClampScaleDownDelay:
		return "scale-down-delay"
	default:
		return fmt.Sprintf("ClampKind(%d)", uint8(k))
	}
}

// Series says which window's count a clamp applied to.
type Series uint8

const (
	// SeriesStable is the count from the stable window.
	SeriesStable Series = iota
	// SeriesPanic is the count from the panic window.
	SeriesPanic
	// SeriesDesired is the combined desired scale.
	SeriesDesired
)

func (s Series) String() string {
	switch s {
	case SeriesStable:
		return "stable"
	case SeriesPanic:
		return "panic"
	default:
		return "desired"
	}
}

// Clamp is one rule that changed a count, from Before to After.
type Clamp struct {
	Before float64
	After  int32
	Kind   ClampKind
	Series Series
}

func (c Clamp) String() string {
	b := strconv.FormatFloat(c.Before, 'f', -1, 64)
	switch c.Kind {
	case ClampPanicHold:
		return fmt.Sprintf("panic: desired held at %d, would be %s", c.After, b)
	case ClampScaleDownDelay:
		return fmt.Sprintf("scale-down-delay: desired held at %d, would be %s", c.After, b)
	case ClampPanicWindow:
		return fmt.Sprintf("panic-window: stable %s → panic %d", b, c.After)
	}
	if c.Series == SeriesStable {
		return fmt.Sprintf("%s: %s → %d", c.Kind, b, c.After)
	}
	return fmt.Sprintf("%s (%s): %s → %d", c.Kind, c.Series, b, c.After)
}

// maxClamps is the most clamps one decision can apply: a rate and the
// activation scale on each series, the panic window, the panic hold and the
// delay.
const maxClamps = 7

// Decision is one run of the decision math with everything that went into it.
// It is a plain value: copying it copies everything.
type Decision struct {
	// At is the time the decision was made for; Trigger says why.
	At      time.Time
	Trigger Trigger
	// Invalid is Valid (0) for a valid decision. An invalid decision changes
	// no state and leaves the status alone.
	Invalid Invalid

	// Inputs.
	Metric    Metric
	ReadyPods int32
	// ObservedStable and ObservedPanic are the window averages of Metric.
	ObservedStable float64
	ObservedPanic  float64
	// StableWindow and PanicWindow are the averaging windows' lengths.
	StableWindow time.Duration
	PanicWindow  time.Duration
	// TargetValue and TotalValue are the per-pod target and capacity.
	TargetValue float64
	TotalValue  float64
	// PanicThreshold is the panic entry ratio; TargetBurstCapacity the TBC.
	PanicThreshold      float64
	TargetBurstCapacity float64

	// Intermediates.
	// MaxScaleUp is ⌈max-scale-up-rate × max(1, ready)⌉ and MaxScaleDown is
	// ⌊max(1, ready) / max-scale-down-rate⌋ (0 when unreachable).
	MaxScaleUp   float64
	MaxScaleDown float64
	// RawStable and RawPanic are the demands ⌈observed / target⌉ before any
	// clamp; DesiredStable and DesiredPanic are after the rate and
	// activation-scale clamps.
	RawStable     float64
	RawPanic      float64
	DesiredStable int32
	DesiredPanic  int32
	// OverThreshold reports RawPanic / max(1, ready) ≥ PanicThreshold.
	OverThreshold bool

	// Panic state after the decision. PanicStartUnixNano is when the current
	// panic began and PanicLastOverUnixNano the last tick over the threshold,
	// in Unix nanoseconds (kept compact: one Decision is stored per target);
	// both are 0 when not panicking. MaxPanicPods is the panic high-water mark.
	Panicking             bool
	PanicStartUnixNano    int64
	PanicLastOverUnixNano int64
	MaxPanicPods          int32

	// Result.
	// Desired is the desired scale; ExcessBurstCapacity the EBC.
	Desired             int32
	ExcessBurstCapacity int32

	clamps  [maxClamps]Clamp
	nClamps uint8
}

// PanicStart returns when the current panic began (zero when not panicking).
func (d *Decision) PanicStart() time.Time { return unixNano(d.PanicStartUnixNano) }

// PanicLastOver returns the last tick over the panic threshold (zero when not
// panicking); panic ends one stable window after it.
func (d *Decision) PanicLastOver() time.Time { return unixNano(d.PanicLastOverUnixNano) }

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Valid reports whether the decision is valid.
func (d *Decision) Valid() bool { return d.Invalid == Valid }

// Clamps returns the rules that changed a count, in the order applied.
func (d *Decision) Clamps() []Clamp {
	out := make([]Clamp, d.nClamps)
	copy(out, d.clamps[:d.nClamps])
	return out
}

func (d *Decision) addClamp(c Clamp) {
	if int(d.nClamps) < len(d.clamps) {
		d.clamps[d.nClamps] = c
		d.nClamps++
	}
}

// finalClamp returns the last clamp that shaped the desired scale, skipping
// clamps on the series that was not used.
func (d *Decision) finalClamp() (Clamp, bool) {
	for i := int(d.nClamps) - 1; i >= 0; i-- {
		c := d.clamps[i]
		if c.Series == SeriesPanic && !d.Panicking {
			continue
		}
		return c, true
	}
	return Clamp{}, false
}

func ff(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Reason is a one-line human explanation of the desired scale, such as
// "panic: desired held at 12, would be 7" or "max-scale-down-rate: 10 → 5".
func (d *Decision) Reason() string {
	if !d.Valid() {
		return fmt.Sprintf("no decision: %s (stable %v window of %s is empty)", d.Invalid, d.StableWindow, d.Metric)
	}
	if c, ok := d.finalClamp(); ok {
		switch c.Kind {
		case ClampMaxScaleDownRate, ClampMaxScaleUpRate:
			// Told as a step from the ready count, the way an operator sees it.
			return fmt.Sprintf("%s: %d → %d (demand %s pods)", c.Kind, d.ReadyPods, d.Desired, ff(c.Before))
		}
		return c.String()
	}
	if d.Panicking {
		return fmt.Sprintf("panic: %s %s over %v / target %s → %d", d.Metric, ff(d.ObservedPanic), d.PanicWindow, ff(d.TargetValue), d.Desired)
	}
	return fmt.Sprintf("stable: %s %s over %v / target %s → %d", d.Metric, ff(d.ObservedStable), d.StableWindow, ff(d.TargetValue), d.Desired)
}

// Explain renders the decision with its inputs, intermediates and clamps on
// several lines, for humans.
func (d *Decision) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s: %s\n", d.Trigger, d.At.UTC().Format(time.RFC3339Nano), d.Reason())
	if !d.Valid() {
		fmt.Fprintf(&b, "  inputs: metric %s, ready pods %d; status unchanged\n", d.Metric, d.ReadyPods)
		return b.String()
	}
	fmt.Fprintf(&b, "  inputs: metric %s, ready pods %d, observed stable %s over %v, panic %s over %v\n",
		d.Metric, d.ReadyPods, ff(d.ObservedStable), d.StableWindow, ff(d.ObservedPanic), d.PanicWindow)
	fmt.Fprintf(&b, "  target %s per pod, total %s, panic threshold %s, target burst capacity %s\n",
		ff(d.TargetValue), ff(d.TotalValue), ff(d.PanicThreshold), ff(d.TargetBurstCapacity))
	fmt.Fprintf(&b, "  demand: stable %s pods, panic %s pods; rate bounds [%s, %s]\n",
		ff(d.RawStable), ff(d.RawPanic), ff(d.MaxScaleDown), ff(d.MaxScaleUp))
	if d.Panicking {
		fmt.Fprintf(&b, "  panicking since %s (last over threshold %s), high-water mark %d\n",
			d.PanicStart().Format(time.RFC3339), d.PanicLastOver().Format(time.RFC3339), d.MaxPanicPods)
	} else {
		fmt.Fprintf(&b, "  not panicking (over threshold: %v)\n", d.OverThreshold)
	}
	for _, c := range d.clamps[:d.nClamps] {
		fmt.Fprintf(&b, "  clamp %s\n", c)
	}
	fmt.Fprintf(&b, "  desired %d, excess burst capacity %d\n", d.Desired, d.ExcessBurstCapacity)
	return b.String()
}
