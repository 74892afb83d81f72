package kpaconfig

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// Prefix is the annotation group every autoscaling key lives in.
const Prefix = "autoscaling.knative.dev/"

// Annotation keys, verbatim from Knative (pkg/apis/autoscaling/register.go).
const (
	AnnotationClass                         = Prefix + "class"
	AnnotationMetric                        = Prefix + "metric"
	AnnotationTarget                        = Prefix + "target"
	AnnotationTargetUtilizationPercentage   = Prefix + "target-utilization-percentage"
	AnnotationTargetBurstCapacity           = Prefix + "target-burst-capacity"
	AnnotationWindow                        = Prefix + "window"
	AnnotationPanicWindowPercentage         = Prefix + "panic-window-percentage"
	AnnotationPanicThresholdPercentage      = Prefix + "panic-threshold-percentage"
	AnnotationMinScale                      = Prefix + "min-scale"
	AnnotationMaxScale                      = Prefix + "max-scale"
	AnnotationInitialScale                  = Prefix + "initial-scale"
	AnnotationActivationScale               = Prefix + "activation-scale"
	AnnotationScaleDownDelay                = Prefix + "scale-down-delay"
	AnnotationScaleToZeroPodRetentionPeriod = Prefix + "scale-to-zero-pod-retention-period"
	AnnotationMetricAggregationAlgorithm    = Prefix + "metric-aggregation-algorithm"

	// AnnotationProgressDeadline is serving's, not autoscaling's.
	AnnotationProgressDeadline = "serving.knative.dev/progress-deadline"

	// AnnotationKeepAlive is tidal's: "predictive" or "fixed" (KeyKeepAlive
	// sets the default).
	AnnotationKeepAlive = "autoscaling.tidal.dev/keep-alive"
)

// legacy maps each kebab-case key to its legacy camelCase alias; the
// kebab-case key wins when both are present.
var legacy = map[string]string{
	AnnotationTargetUtilizationPercentage:   Prefix + "targetUtilizationPercentage",
	AnnotationTargetBurstCapacity:           Prefix + "targetBurstCapacity",
	AnnotationPanicWindowPercentage:         Prefix + "panicWindowPercentage",
	AnnotationPanicThresholdPercentage:      Prefix + "panicThresholdPercentage",
	AnnotationMinScale:                      Prefix + "minScale",
	AnnotationMaxScale:                      Prefix + "maxScale",
	AnnotationInitialScale:                  Prefix + "initialScale",
	AnnotationScaleDownDelay:                Prefix + "scaleDownDelay",
	AnnotationScaleToZeroPodRetentionPeriod: Prefix + "scaleToZeroPodRetentionPeriod",
	AnnotationMetricAggregationAlgorithm:    Prefix + "metricAggregationAlgorithm",
}

// known is every accepted autoscaling.knative.dev/ key, aliases included.
var known = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{
		AnnotationClass, AnnotationMetric, AnnotationTarget, AnnotationTargetUtilizationPercentage,
		AnnotationTargetBurstCapacity, AnnotationWindow, AnnotationPanicWindowPercentage,
		AnnotationPanicThresholdPercentage, AnnotationMinScale, AnnotationMaxScale, AnnotationInitialScale,
		AnnotationActivationScale, AnnotationScaleDownDelay, AnnotationScaleToZeroPodRetentionPeriod,
		AnnotationMetricAggregationAlgorithm,
	} {
		m[k] = true
	}
	for _, alias := range legacy {
		m[alias] = true
	}
	return m
}()

// Aggregation algorithm values.
const (
	AlgorithmLinear                    = "linear"
	AlgorithmWeightedExponential       = "weighted-exponential"
	AlgorithmWeightedExponentialLegacy = "weightedExponential"
)

// Annotations are a revision's parsed autoscaling annotations. A nil pointer
// means the annotation is absent and the config applies.
type Annotations struct {
	// Class is the pod autoscaler class; "" means the config's default.
	Class string
	// Metric is the scaling metric, when set.
	Metric *kpaspec.Metric
	// Target is the per-pod target (the total before utilisation).
	Target *float64
	// TargetUtilizationPercentage is the utilisation in percent.
	TargetUtilizationPercentage *float64
	TargetBurstCapacity         *float64
	Window                      *time.Duration
	PanicWindowPercentage       *float64
	PanicThresholdPercentage    *float64
	MinScale                    *int32
	MaxScale                    *int32
	InitialScale                *int32
	ActivationScale             *int32
	ScaleDownDelay              *time.Duration
	ScaleToZeroPodRetention     *time.Duration
	Aggregation                 *kpaspec.Algorithm
	ProgressDeadline            *time.Duration
	KeepAlive                   *KeepAlive
}

// lookup returns the value of key, or of its legacy alias.
func lookup(ann map[string]string, key string) (string, string, bool) {
	if v, ok := ann[key]; ok {
		return key, v, true
	}
	if alias, ok := legacy[key]; ok {
		if v, ok := ann[alias]; ok {
			return alias, v, true
		}
	}
	return "", "", false
}

// ParseAnnotations parses and validates a revision's annotations against cfg
// (which supplies max-scale-limit and allow-zero-initial-scale). Keys outside
// autoscaling.knative.dev/ are ignored, except serving's progress-deadline
// and tidal's keep-alive; an unknown autoscaling.knative.dev/ key is refused.
func ParseAnnotations(ann map[string]string, cfg Config) (Annotations, error) {
	var a Annotations
	var unknown []string
	for k := range ann {
		if strings.HasPrefix(k, Prefix) && !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return a, keyErr(unknown[0], ann[unknown[0]], "unknown %s annotation", strings.TrimSuffix(Prefix, "/"))
	}

	if _, v, ok := lookup(ann, AnnotationClass); ok {
		if strings.HasSuffix(v, ".knative.dev") && v != ClassKPA && v != ClassHPA {
			return a, keyErr(AnnotationClass, v, "want %s or %s", ClassKPA, ClassHPA)
		}
		a.Class = v
	}
	class := a.Class
	if class == "" {
		class = cfg.PodAutoscalerClass
	}
	if _, v, ok := lookup(ann, AnnotationMetric); ok {
		switch v {
		case "concurrency":
			m := kpaspec.Concurrency
			a.Metric = &m
		case "rps":
			m := kpaspec.RPS
			a.Metric = &m
		default:
			if class == ClassKPA {
				return a, keyErr(AnnotationMetric, v, "want concurrency or rps for %s", ClassKPA)
			}
		}
	}

	floats := []struct {
		key      string
		dst      **float64
		ok       func(float64) bool
		wantDesc string
	}{
		{AnnotationTarget, &a.Target, func(f float64) bool { return f >= TargetMin }, fmt.Sprintf("want at least %v", TargetMin)},
		{AnnotationTargetUtilizationPercentage, &a.TargetUtilizationPercentage, func(f float64) bool { return f >= 1 && f <= 100 }, "want a percentage in [1, 100]"},
		{AnnotationTargetBurstCapacity, &a.TargetBurstCapacity, func(f float64) bool { return f >= 0 || f == -1 }, "want ≥ 0 or exactly -1"},
		{AnnotationPanicWindowPercentage, &a.PanicWindowPercentage, func(f float64) bool { return f >= 1 && f <= 100 }, "want a percentage in [1, 100]"},
		{AnnotationPanicThresholdPercentage, &a.PanicThresholdPercentage, func(f float64) bool {
			return f >= PanicThresholdPercentageMin && f <= PanicThresholdPercentageMax
		}, fmt.Sprintf("want a percentage in [%v, %v]", PanicThresholdPercentageMin, PanicThresholdPercentageMax)},
	}
	for _, f := range floats {
		key, v, ok := lookup(ann, f.key)
		if !ok {
			continue
		}
		x, err := parseFloat(key, v)
		if err != nil {
			return a, err
		}
		if !f.ok(x) {
			return a, keyErr(key, v, "%s", f.wantDesc)
		}
		*f.dst = &x
	}

	durations := []struct {
		key   string
		dst   **time.Duration
		lo    time.Duration
		hi    time.Duration
		whole bool
	}{
		{AnnotationWindow, &a.Window, WindowMin, WindowMax, true},
		{AnnotationScaleDownDelay, &a.ScaleDownDelay, 0, ScaleDownDelayMax, true},
		{AnnotationScaleToZeroPodRetentionPeriod, &a.ScaleToZeroPodRetention, 0, RetentionPeriodMax, false},
		{AnnotationProgressDeadline, &a.ProgressDeadline, time.Second, 1<<63 - 1, true},
	}
	for _, f := range durations {
		key, v, ok := lookup(ann, f.key)
		if !ok {
			continue
		}
		d, err := parseDuration(key, v)
		if err != nil {
			return a, err
		}
		if d < f.lo || d > f.hi {
			if f.hi == 1<<63-1 {
				return a, keyErr(key, v, "want at least %v", f.lo)
			}
			return a, keyErr(key, v, "want a duration in [%v, %v]", f.lo, f.hi)
		}
		if f.whole && !wholeSeconds(d) {
			return a, keyErr(key, v, "want whole seconds")
		}
		*f.dst = &d
	}

	ints := []struct {
		key string
		dst **int32
	}{
		{AnnotationMinScale, &a.MinScale},
		{AnnotationMaxScale, &a.MaxScale},
		{AnnotationInitialScale, &a.InitialScale},
		{AnnotationActivationScale, &a.ActivationScale},
	}
	for _, f := range ints {
		key, v, ok := lookup(ann, f.key)
		if !ok {
			continue
		}
		x, err := parseInt32(key, v)
		if err != nil {
			return a, err
		}
		if x < 0 {
			return a, keyErr(key, v, "want an integer ≥ 0")
		}
		*f.dst = &x
	}
	if err := a.validateScales(ann, cfg); err != nil {
		return a, err
	}

	if key, v, ok := lookup(ann, AnnotationMetricAggregationAlgorithm); ok {
		var algo kpaspec.Algorithm
		switch v {
		case AlgorithmLinear:
			algo = kpaspec.Linear
		case AlgorithmWeightedExponential, AlgorithmWeightedExponentialLegacy:
			algo = kpaspec.WeightedExponential
		default:
			// Knative checks this only for an explicit KPA class and
			// otherwise falls back to linear; tidal always refuses it.
			return a, keyErr(key, v, "want %s or %s", AlgorithmLinear, AlgorithmWeightedExponential)
		}
		a.Aggregation = &algo
	}
	if v, ok := ann[AnnotationKeepAlive]; ok {
		k, err := parseKeepAlive(AnnotationKeepAlive, v)
		if err != nil {
			return a, err
		}
		a.KeepAlive = &k
	}
	return a, nil
}

func (a *Annotations) validateScales(ann map[string]string, cfg Config) error {
	raw := func(key string) (string, string) {
		k, v, _ := lookup(ann, key)
		return k, v
	}
	if a.MaxScale != nil {
		k, v := raw(AnnotationMaxScale)
		if cfg.MaxScaleLimit > 0 && (*a.MaxScale == 0 || *a.MaxScale > cfg.MaxScaleLimit) {
			return keyErr(k, v, "want a value in [1, %s %d]", KeyMaxScaleLimit, cfg.MaxScaleLimit)
		}
	}
	if a.MinScale != nil && a.MaxScale != nil && *a.MaxScale != 0 && *a.MinScale > *a.MaxScale {
		k, v := raw(AnnotationMinScale)
		return keyErr(k, v, "want at most max-scale %d", *a.MaxScale)
	}
	if a.InitialScale != nil && *a.InitialScale == 0 && !cfg.AllowZeroInitialScale {
		k, v := raw(AnnotationInitialScale)
		return keyErr(k, v, "want ≥ 1 unless %s is true", KeyAllowZeroInitialScale)
	}
	if a.ActivationScale != nil {
		k, v := raw(AnnotationActivationScale)
		as := *a.ActivationScale
		switch {
		case as < 2:
			return keyErr(k, v, "want at least 2")
		case a.MinScale != nil && as < *a.MinScale:
			return keyErr(k, v, "want at least min-scale %d", *a.MinScale)
		case a.MaxScale != nil && *a.MaxScale > 0 && as > *a.MaxScale:
			return keyErr(k, v, "want at most max-scale %d", *a.MaxScale)
		}
	}
	return nil
}
