package kpaconfig

import (
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// ActivationTimeoutBuffer is added to the progress deadline to get the
// activation timeout (Knative's activationTimeoutBuffer).
const ActivationTimeoutBuffer = 30 * time.Second

// MaxContainerConcurrency is Knative's upper bound on containerConcurrency.
const MaxContainerConcurrency = 1000

// Revision is everything the KPA derives its settings from: the cluster
// config, the revision's annotations, its containerConcurrency and whether a
// route reaches it. Its methods return the effective values (spec §6.3, §7).
type Revision struct {
	Config      Config
	Deployment  DeploymentConfig
	Annotations Annotations
	// ContainerConcurrency is the revision's hard limit; 0 means unlimited.
	ContainerConcurrency int64
	// Reachable is false only for an Unreachable PA; Unknown is reachable.
	Reachable bool
}

// NewRevision parses a revision's annotations against cfg and validates
// containerConcurrency.
func NewRevision(cfg Config, dep DeploymentConfig, annotations map[string]string, containerConcurrency int64, reachable bool) (Revision, error) {
	if containerConcurrency < 0 || containerConcurrency > MaxContainerConcurrency {
		return Revision{}, fmt.Errorf("containerConcurrency %d: want [0, %d]", containerConcurrency, MaxContainerConcurrency)
	}
	a, err := ParseAnnotations(annotations, cfg)
	if err != nil {
		return Revision{}, err
	}
	return Revision{Config: cfg, Deployment: dep, Annotations: a, ContainerConcurrency: containerConcurrency, Reachable: reachable}, nil
}

// Class returns the pod autoscaler class: the annotation, else the config's
// pod-autoscaler-class. Only ClassKPA revisions belong to the KPA decider.
func (r *Revision) Class() string {
	if r.Annotations.Class != "" {
		return r.Annotations.Class
	}
	return r.Config.PodAutoscalerClass
}

// Metric returns the scaling metric (concurrency unless annotated).
func (r *Revision) Metric() kpaspec.Metric {
	if r.Annotations.Metric != nil {
		return *r.Annotations.Metric
	}
	return kpaspec.Concurrency
}

// Target returns the per-pod target value and total value: total comes from
// containerConcurrency or the defaults, or the target annotation (capped by
// containerConcurrency for concurrency), and target = max(0.01, total ×
// utilisation).
func (r *Revision) Target() (target, total float64) {
	c := &r.Config
	var util float64
	m := r.Metric()
	if m == kpaspec.RPS {
		total, util = c.RPSTargetDefault, c.TargetUtilization
	} else {
		total = float64(r.ContainerConcurrency)
		if total == 0 {
			total = c.ContainerConcurrencyTargetDefault
		}
		util = c.ContainerConcurrencyTargetFraction
	}
	if t := r.Annotations.Target; t != nil {
		total = *t
		if m == kpaspec.Concurrency && r.ContainerConcurrency != 0 {
			total = math.Min(*t, float64(r.ContainerConcurrency))
		}
	}
	if u := r.Annotations.TargetUtilizationPercentage; u != nil {
		util = *u / 100
	}
	return math.Max(TargetMin, total*util), total
}

// StableWindow returns the window annotation or stable-kpaspec.
func (r *Revision) StableWindow() time.Duration {
	if w := r.Annotations.Window; w != nil {
		return *w
	}
	return r.Config.StableWindow
}

// PanicWindow is round(stable × panic-window-percentage / 100) to the second,
// at least 1 s.
func (r *Revision) PanicWindow() time.Duration {
	pct := r.Config.PanicWindowPercentage
	if p := r.Annotations.PanicWindowPercentage; p != nil {
		pct = *p
	}
	pw := time.Duration(float64(r.StableWindow()) * pct / 100).Round(time.Second)
	return max(pw, PanicWindowMin)
}

// PanicThreshold returns the panic threshold as a fraction (2.0 for 200 %).
func (r *Revision) PanicThreshold() float64 {
	if p := r.Annotations.PanicThresholdPercentage; p != nil {
		return *p / 100
	}
	return r.Config.PanicThresholdPercentage / 100
}

// TargetBurstCapacity returns the annotation or target-burst-capacity.
func (r *Revision) TargetBurstCapacity() float64 {
	if t := r.Annotations.TargetBurstCapacity; t != nil {
		return *t
	}
	return r.Config.TargetBurstCapacity
}

// ScaleDownDelay returns the annotation or scale-down-delay.
func (r *Revision) ScaleDownDelay() time.Duration {
	if d := r.Annotations.ScaleDownDelay; d != nil {
		return *d
	}
	return r.Config.ScaleDownDelay
}

// ActivationScale returns the annotation, else 0 (none).
func (r *Revision) ActivationScale() int32 {
	if a := r.Annotations.ActivationScale; a != nil {
		return *a
	}
	return 0
}

// InitialScale returns the initial-scale annotation unless it is 0 and zero
// is not allowed; otherwise the config's initial-scale.
func (r *Revision) InitialScale() int32 {
	if i := r.Annotations.InitialScale; i != nil && (*i != 0 || r.Config.AllowZeroInitialScale) {
		return *i
	}
	return r.Config.InitialScale
}

// ScaleBounds returns min and max scale (annotation or config); min is 0 for
// an unreachable revision, and max 0 means unbounded.
func (r *Revision) ScaleBounds() (lo, hi int32) {
	lo, hi = r.Config.MinScale, r.Config.MaxScale
	if m := r.Annotations.MinScale; m != nil {
		lo = *m
	}
	if m := r.Annotations.MaxScale; m != nil {
		hi = *m
	}
	if !r.Reachable {
		lo = 0
	}
	return lo, hi
}

// ScaleToZeroPodRetention returns the retention annotation or config value.
func (r *Revision) ScaleToZeroPodRetention() time.Duration {
	if d := r.Annotations.ScaleToZeroPodRetention; d != nil {
		return *d
	}
	return r.Config.ScaleToZeroPodRetentionPeriod
}

// KeepAlive returns the keep-alive annotation, else the config's keep-alive.
func (r *Revision) KeepAlive() KeepAlive {
	if k := r.Annotations.KeepAlive; k != nil {
		return *k
	}
	return r.Config.KeepAlive
}

// Predictive reports whether the target keeps its pods by the predictive
// keep-alive policy: it asks for it and may scale to zero (scale to zero
// enabled, min-scale 0). min-scale and scale to zero disabled keep their
// precedence: the policy has nothing to decide then.
func (r *Revision) Predictive() bool {
	lo, _ := r.ScaleBounds()
	return r.KeepAlive() == KeepAlivePredictive && r.Config.EnableScaleToZero && lo == 0
}

// ActivationTimeout is the progress deadline (annotation or config-deployment)
// plus 30 s.
func (r *Revision) ActivationTimeout() time.Duration {
	pd := r.Deployment.ProgressDeadline
	if d := r.Annotations.ProgressDeadline; d != nil {
		pd = *d
	}
	return pd + ActivationTimeoutBuffer
}

// Aggregation returns the averaging algorithm (linear unless annotated).
func (r *Revision) Aggregation() kpaspec.Algorithm {
	if a := r.Annotations.Aggregation; a != nil {
		return *a
	}
	return kpaspec.Linear
}

// Scraped reports whether the revision has a scrape target: not with TBC -1.
func (r *Revision) Scraped() bool { return r.TargetBurstCapacity() != -1 }

// DeciderSpec resolves the decider's spec (Knative's MakeDecider and the
// Metric's windows).
func (r *Revision) DeciderSpec() kpaspec.Spec {
	target, total := r.Target()
	return kpaspec.Spec{
		ScalingMetric:       r.Metric(),
		TargetValue:         target,
		TotalValue:          total,
		TargetBurstCapacity: r.TargetBurstCapacity(),
		PanicThreshold:      r.PanicThreshold(),
		MaxScaleUpRate:      r.Config.MaxScaleUpRate,
		MaxScaleDownRate:    r.Config.MaxScaleDownRate,
		StableWindow:        r.StableWindow(),
		ScaleDownDelay:      r.ScaleDownDelay(),
		ActivationScale:     r.ActivationScale(),
		InitialScale:        r.InitialScale(),
		Reachable:           r.Reachable,
		ActivatorCapacity:   r.Config.ActivatorCapacity,
		MetricStableWindow:  r.StableWindow(),
		MetricPanicWindow:   r.PanicWindow(),
		Aggregation:         r.Aggregation(),
		Scraped:             r.Scraped(),
	}
}
