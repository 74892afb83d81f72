// Package kpaspec holds what Knative's KPA is asked to do for one target
// and what it answers, as plain data the decider (which decides), the
// actuator (which applies) and strategy/kpaconfig (which resolves
// annotations) all share: the decider spec, its metric and window
// algorithm, and the decider status.
package kpaspec

import (
	"fmt"
	"math"
	"time"
)

// Algorithm selects how a window averages its buckets.
type Algorithm uint8

const (
	// Linear averages the buckets written within the window, ignoring trailing
	// gaps and counting interior gaps as zero, rounded to 6 decimals. It is
	// Knative's default.
	Linear Algorithm = iota
	// WeightedExponential weights each bucket by an exponentially decaying
	// factor, newest first, without rounding and without a partial-window
	// correction.
	WeightedExponential
)

func (a Algorithm) String() string {
	switch a {
	case Linear:
		return "linear"
	case WeightedExponential:
		return "weighted-exponential"
	default:
		return fmt.Sprintf("Algorithm(%d)", uint8(a))
	}
}

// BucketSize is the granularity of every window (Knative's config.BucketSize).
const BucketSize = time.Second

// MaxWindow bounds a window's length so that a bad spec cannot allocate
// unbounded memory; Knative's longest stable window is 1 h.
const MaxWindow = time.Hour

// ScaleUnknown is the desired scale of a decider that has not made a valid
// decision yet (Knative's scaleUnknown).
const ScaleUnknown int32 = -1

// Status is what the decider reports for a target: Knative's DeciderStatus.
type Status struct {
	// DesiredScale is the last valid decision, or ScaleUnknown (-1) before
	// the first one. It is never negative otherwise.
	DesiredScale int32
	// ExcessBurstCapacity is the spare capacity after serving the panic
	// demand; negative means the activator should stay in the path.
	ExcessBurstCapacity int32
	// PredictedIdle marks a DesiredScale of 0 that is the predictive
	// keep-alive policy's (decider/keepalive): no request is expected
	// before its pre-warm, so the reconciler lets the last pod go without
	// the fixed scale-to-zero grace, pod retention and stable window of
	// activity. Knative's decider never sets it.
	PredictedIdle bool
}

// Metric is the quantity a target scales on.
type Metric uint8

const (
	// Concurrency scales on in-flight requests (Knative's default).
	Concurrency Metric = iota
	// RPS scales on requests per second.
	RPS
)

func (m Metric) String() string {
	switch m {
	case Concurrency:
		return "concurrency"
	case RPS:
		return "rps"
	default:
		return fmt.Sprintf("Metric(%d)", uint8(m))
	}
}

// Spec is what the decider is asked to do for one target: Knative's
// DeciderSpec plus the Metric's window settings. Build it with
// strategy/kpaconfig, which resolves annotations and config-autoscaler.
type Spec struct {
	// ScalingMetric selects the concurrency or the RPS windows.
	ScalingMetric Metric
	// TargetValue is the per-pod demand that one pod should carry
	// (total × utilisation, at least 0.01). Must be > 0.
	TargetValue float64
	// TotalValue is the per-pod capacity, used for excess burst capacity.
	TotalValue float64
	// TargetBurstCapacity is the spare capacity to keep; 0 disables the
	// computation and -1 keeps the activator always in the path.
	TargetBurstCapacity float64
	// PanicThreshold is the panic-window demand, as a multiple of ready pods,
	// at which panic mode starts (2.0 for 200 %).
	PanicThreshold float64
	// MaxScaleUpRate and MaxScaleDownRate bound one step's change, as factors
	// of the ready pod count. Both must be > 1.
	MaxScaleUpRate   float64
	MaxScaleDownRate float64
	// StableWindow is how long panic mode lasts after the last tick over the
	// threshold.
	StableWindow time.Duration
	// ScaleDownDelay holds scale-downs for this long (a max over 2 s slots);
	// 0 means none. It takes effect only when the target is created.
	ScaleDownDelay time.Duration
	// ActivationScale is the smallest non-zero scale; values ≤ 1 mean none.
	ActivationScale int32
	// InitialScale is the scale of a new target; it sets the initial excess
	// burst capacity.
	InitialScale int32
	// Reachable is false when no route sends traffic to the target: there is
	// no scale-down floor and no scale-down delay then.
	Reachable bool
	// ActivatorCapacity is the request capacity of one activator.
	ActivatorCapacity float64

	// MetricStableWindow and MetricPanicWindow are the lengths of the stable
	// and panic averaging windows, whole seconds.
	MetricStableWindow time.Duration
	MetricPanicWindow  time.Duration
	// Aggregation is the averaging algorithm of both windows.
	Aggregation Algorithm
	// Scraped is false when no scrape target exists (TBC -1): an empty stable
	// window then reads as zero instead of "no data".
	Scraped bool
}

// maxScaleDownDelay bounds the delay window (Knative's annotation allows 1 h).
const maxScaleDownDelay = time.Hour

// Validate reports the first field that would make the decision math
// meaningless, naming the field and the value.
func (s *Spec) Validate() error {
	finite := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("spec %s %v: want a finite number", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"target_value", s.TargetValue}, {"total_value", s.TotalValue},
		{"target_burst_capacity", s.TargetBurstCapacity}, {"panic_threshold", s.PanicThreshold},
		{"max_scale_up_rate", s.MaxScaleUpRate}, {"max_scale_down_rate", s.MaxScaleDownRate},
		{"activator_capacity", s.ActivatorCapacity},
	} {
		if err := finite(f.name, f.v); err != nil {
			return err
		}
	}
	switch {
	case s.ScalingMetric != Concurrency && s.ScalingMetric != RPS:
		return fmt.Errorf("spec scaling_metric %v: want concurrency or rps", s.ScalingMetric)
	case s.TargetValue <= 0:
		return fmt.Errorf("spec target_value %v: want > 0", s.TargetValue)
	case s.TotalValue <= 0:
		return fmt.Errorf("spec total_value %v: want > 0", s.TotalValue)
	case s.TargetBurstCapacity < 0 && s.TargetBurstCapacity != -1:
		return fmt.Errorf("spec target_burst_capacity %v: want ≥ 0 or -1", s.TargetBurstCapacity)
	case s.PanicThreshold <= 0:
		return fmt.Errorf("spec panic_threshold %v: want > 0", s.PanicThreshold)
	case s.MaxScaleUpRate <= 1:
		return fmt.Errorf("spec max_scale_up_rate %v: want > 1", s.MaxScaleUpRate)
	case s.MaxScaleDownRate <= 1:
		return fmt.Errorf("spec max_scale_down_rate %v: want > 1", s.MaxScaleDownRate)
	case s.StableWindow <= 0:
		return fmt.Errorf("spec stable_window %v: want > 0", s.StableWindow)
	case s.ScaleDownDelay < 0 || s.ScaleDownDelay > maxScaleDownDelay:
		return fmt.Errorf("spec scale_down_delay %v: want [0s, %v]", s.ScaleDownDelay, maxScaleDownDelay)
	case s.ActivationScale < 0:
		return fmt.Errorf("spec activation_scale %d: want ≥ 0", s.ActivationScale)
	case s.InitialScale < 0:
		return fmt.Errorf("spec initial_scale %d: want ≥ 0", s.InitialScale)
	case s.MetricStableWindow < BucketSize || s.MetricStableWindow > MaxWindow:
		return fmt.Errorf("spec metric_stable_window %v: want [%v, %v]", s.MetricStableWindow, BucketSize, MaxWindow)
	case s.MetricPanicWindow < BucketSize || s.MetricPanicWindow > MaxWindow:
		return fmt.Errorf("spec metric_panic_window %v: want [%v, %v]", s.MetricPanicWindow, BucketSize, MaxWindow)
	case s.Aggregation != Linear && s.Aggregation != WeightedExponential:
		return fmt.Errorf("spec aggregation %v: want linear or weighted-exponential", s.Aggregation)
	}
	return nil
}

// InitialExcessBurstCapacity is the decider's EBC before its first decision:
// -1 for TBC -1, 0 for TBC 0, else InitialScale × TotalValue − TBC.
func (s *Spec) InitialExcessBurstCapacity() int32 {
	switch {
	case s.TargetBurstCapacity < 0:
		return -1
	case s.TargetBurstCapacity == 0:
		return 0
	default:
		return SaturateInt32(float64(s.InitialScale)*s.TotalValue - s.TargetBurstCapacity)
	}
}

// SaturateInt32 converts like Go's int32(f) for in-range values and
// saturates outside, where the conversion is implementation-defined.
func SaturateInt32(f float64) int32 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt32:
		return math.MaxInt32
	case f <= math.MinInt32:
		return math.MinInt32
	default:
		return int32(f)
	}
}
