package kpaconfig

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
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

// parsedAnnotations is Annotations with the raw metric, which is refused
// only for the KPA class, once the class is known.
type parsedAnnotations struct {
	Annotations
	metric *string
}

// annotationKeys are Knative's autoscaling annotations, read as its webhook
// reads them (pkg/apis/autoscaling/annotation_validation.go), with their
// legacy camelCase aliases; the kebab-case key wins when both are set.
var annotationKeys = keyval.New(keyval.Knative,
	keyval.Set(AnnotationClass, keyval.Text(), func(a *parsedAnnotations, v string) { a.Class = v }),
	keyval.Set(AnnotationMetric, keyval.Text(), func(a *parsedAnnotations, v string) { a.metric = &v }),
	floatAnnotation(AnnotationTarget, func(a *Annotations) **float64 { return &a.Target }, keyval.AtLeast(TargetMin)),
	floatAnnotation(AnnotationTargetUtilizationPercentage, func(a *Annotations) **float64 { return &a.TargetUtilizationPercentage }, percentage).Alias(legacy(AnnotationTargetUtilizationPercentage)),
	floatAnnotation(AnnotationTargetBurstCapacity, func(a *Annotations) **float64 { return &a.TargetBurstCapacity },
		keyval.Check[float64]{OK: func(f float64) bool { return f >= 0 || f == -1 }, Want: "≥ 0 or exactly -1"}).Alias(legacy(AnnotationTargetBurstCapacity)),
	floatAnnotation(AnnotationPanicWindowPercentage, func(a *Annotations) **float64 { return &a.PanicWindowPercentage }, percentage).Alias(legacy(AnnotationPanicWindowPercentage)),
	floatAnnotation(AnnotationPanicThresholdPercentage, func(a *Annotations) **float64 { return &a.PanicThresholdPercentage },
		keyval.Check[float64]{OK: func(f float64) bool { return f >= PanicThresholdPercentageMin && f <= PanicThresholdPercentageMax },
			Want: fmt.Sprintf("a percentage in [%v, %v]", PanicThresholdPercentageMin, PanicThresholdPercentageMax)}).Alias(legacy(AnnotationPanicThresholdPercentage)),
	durationAnnotation(AnnotationWindow, func(a *Annotations) **time.Duration { return &a.Window }, true, keyval.Between(WindowMin, WindowMax)),
	durationAnnotation(AnnotationScaleDownDelay, func(a *Annotations) **time.Duration { return &a.ScaleDownDelay }, true, keyval.Between(0, ScaleDownDelayMax)).Alias(legacy(AnnotationScaleDownDelay)),
	durationAnnotation(AnnotationScaleToZeroPodRetentionPeriod, func(a *Annotations) **time.Duration { return &a.ScaleToZeroPodRetention }, false,
		keyval.Between(0, RetentionPeriodMax)).Alias(legacy(AnnotationScaleToZeroPodRetentionPeriod)),
	durationAnnotation(AnnotationProgressDeadline, func(a *Annotations) **time.Duration { return &a.ProgressDeadline }, true, keyval.AtLeast(time.Second)),
	scaleAnnotation(AnnotationMinScale, func(a *Annotations) **int32 { return &a.MinScale }).Alias(legacy(AnnotationMinScale)),
	scaleAnnotation(AnnotationMaxScale, func(a *Annotations) **int32 { return &a.MaxScale }).Alias(legacy(AnnotationMaxScale)),
	scaleAnnotation(AnnotationInitialScale, func(a *Annotations) **int32 { return &a.InitialScale }).Alias(legacy(AnnotationInitialScale)),
	scaleAnnotation(AnnotationActivationScale, func(a *Annotations) **int32 { return &a.ActivationScale }),
	// Knative checks the algorithm only for an explicit KPA class and
	// otherwise falls back to linear; tidal always refuses it.
	keyval.Set(AnnotationMetricAggregationAlgorithm, keyval.OneOf(map[string]kpaspec.Algorithm{
		AlgorithmLinear: kpaspec.Linear, AlgorithmWeightedExponential: kpaspec.WeightedExponential,
		AlgorithmWeightedExponentialLegacy: kpaspec.WeightedExponential,
	}), func(a *parsedAnnotations, x kpaspec.Algorithm) { a.Aggregation = &x }).Alias(legacy(AnnotationMetricAggregationAlgorithm)),
	keyval.Set(AnnotationKeepAlive, keepAlive, func(a *parsedAnnotations, k KeepAlive) { a.KeepAlive = &k }),
)

var percentage = keyval.Check[float64]{OK: func(f float64) bool { return f >= 1 && f <= 100 }, Want: "a percentage in [1, 100]"}

// legacy is the camelCase alias of a kebab-case key.
func legacy(key string) string {
	name := strings.TrimPrefix(key, Prefix)
	for i := strings.IndexByte(name, '-'); i >= 0 && i+1 < len(name); i = strings.IndexByte(name, '-') {
		name = name[:i] + strings.ToUpper(name[i+1:i+2]) + name[i+2:]
	}
	return Prefix + name
}

func floatAnnotation(key string, field func(*Annotations) **float64, check keyval.Check[float64]) keyval.Key[parsedAnnotations] {
	return keyval.Set(key, keyval.Float(check), func(a *parsedAnnotations, x float64) { *field(&a.Annotations) = &x })
}

func durationAnnotation(key string, field func(*Annotations) **time.Duration, whole bool, check keyval.Check[time.Duration]) keyval.Key[parsedAnnotations] {
	return keyval.Set(key, keyval.Duration(whole, check), func(a *parsedAnnotations, x time.Duration) { *field(&a.Annotations) = &x })
}

func scaleAnnotation(key string, field func(*Annotations) **int32) keyval.Key[parsedAnnotations] {
	return keyval.Set(key, keyval.Int[int32](0, math.MaxInt32), func(a *parsedAnnotations, x int32) { *field(&a.Annotations) = &x })
}

// ParseAnnotations parses and validates a revision's annotations against cfg
// (which supplies max-scale-limit and allow-zero-initial-scale). Keys outside
// autoscaling.knative.dev/ are ignored, except serving's progress-deadline
// and tidal's keep-alive; an unknown autoscaling.knative.dev/ key is refused.
func ParseAnnotations(ann map[string]string, cfg Config) (Annotations, error) {
	var unknown []string
	for k := range ann {
		if strings.HasPrefix(k, Prefix) && !annotationKeys.Known(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		k := slices.Min(unknown)
		return Annotations{}, keyval.Unknown(k, ann[k], strings.TrimSuffix(Prefix, "/")+" annotation")
	}
	var p parsedAnnotations
	if _, err := annotationKeys.Parse(&p, ann); err != nil {
		return Annotations{}, err
	}
	a := p.Annotations
	if strings.HasSuffix(a.Class, ".knative.dev") && a.Class != ClassKPA && a.Class != ClassHPA {
		return a, keyErr(AnnotationClass, a.Class, "%s or %s", ClassKPA, ClassHPA)
	}
	class := a.Class
	if class == "" {
		class = cfg.PodAutoscalerClass
	}
	if v := p.metric; v != nil {
		switch *v {
		case "concurrency":
			m := kpaspec.Concurrency
			a.Metric = &m
		case "rps":
			m := kpaspec.RPS
			a.Metric = &m
		default:
			if class == ClassKPA {
				return a, keyErr(AnnotationMetric, *v, "concurrency or rps for %s", ClassKPA)
			}
		}
	}
	return a, a.validateScales(ann, cfg)
}

func (a *Annotations) validateScales(ann map[string]string, cfg Config) error {
	raw := func(key string) (string, string) {
		k, v, _ := annotationKeys.Lookup(ann, key)
		return k, v
	}
	if a.MaxScale != nil {
		k, v := raw(AnnotationMaxScale)
		if cfg.MaxScaleLimit > 0 && (*a.MaxScale == 0 || *a.MaxScale > cfg.MaxScaleLimit) {
			return keyErr(k, v, "a value in [1, %s %d]", KeyMaxScaleLimit, cfg.MaxScaleLimit)
		}
	}
	if a.MinScale != nil && a.MaxScale != nil && *a.MaxScale != 0 && *a.MinScale > *a.MaxScale {
		k, v := raw(AnnotationMinScale)
		return keyErr(k, v, "at most max-scale %d", *a.MaxScale)
	}
	if a.InitialScale != nil && *a.InitialScale == 0 && !cfg.AllowZeroInitialScale {
		k, v := raw(AnnotationInitialScale)
		return keyErr(k, v, "≥ 1 unless %s is true", KeyAllowZeroInitialScale)
	}
	if a.ActivationScale != nil {
		k, v := raw(AnnotationActivationScale)
		as := *a.ActivationScale
		switch {
		case as < 2:
			return keyErr(k, v, "at least 2")
		case a.MinScale != nil && as < *a.MinScale:
			return keyErr(k, v, "at least min-scale %d", *a.MinScale)
		case a.MaxScale != nil && *a.MaxScale > 0 && as > *a.MaxScale:
			return keyErr(k, v, "at most max-scale %d", *a.MaxScale)
		}
	}
	return nil
}
