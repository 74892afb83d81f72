package kpaconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// config-autoscaler keys.
const (
	KeyContainerConcurrencyTargetPercentage = "container-concurrency-target-percentage"
	KeyContainerConcurrencyTargetDefault    = "container-concurrency-target-default"
	KeyRPSTargetDefault                     = "requests-per-second-target-default"
	KeyTargetBurstCapacity                  = "target-burst-capacity"
	KeyStableWindow                         = "stable-window"
	KeyPanicWindowPercentage                = "panic-window-percentage"
	KeyPanicThresholdPercentage             = "panic-threshold-percentage"
	KeyMaxScaleUpRate                       = "max-scale-up-rate"
	KeyMaxScaleDownRate                     = "max-scale-down-rate"
	KeyEnableScaleToZero                    = "enable-scale-to-zero"
	KeyScaleToZeroGracePeriod               = "scale-to-zero-grace-period"
	KeyScaleToZeroPodRetentionPeriod        = "scale-to-zero-pod-retention-period"
	KeyScaleDownDelay                       = "scale-down-delay"
	KeyActivatorCapacity                    = "activator-capacity"
	KeyInitialScale                         = "initial-scale"
	KeyAllowZeroInitialScale                = "allow-zero-initial-scale"
	KeyMinScale                             = "min-scale"
	KeyMaxScale                             = "max-scale"
	KeyMaxScaleLimit                        = "max-scale-limit"
	KeyPodAutoscalerClass                   = "pod-autoscaler-class"

	// KeyKeepAlive is tidal's own key (Knative has none): the cluster's
	// default for AnnotationKeepAlive, KeepAliveFixed unless set.
	KeyKeepAlive = "keep-alive"

	// KeyProgressDeadline is config-deployment's key.
	KeyProgressDeadline = "progress-deadline"
)

// Limits shared by the config and the annotations (Knative's
// pkg/apis/autoscaling constants).
const (
	// TargetMin is the smallest per-pod target.
	TargetMin = 0.01
	// WindowMin and WindowMax bound the stable window.
	WindowMin = 6 * time.Second
	WindowMax = time.Hour
	// PanicWindowMin is the shortest panic window.
	PanicWindowMin = time.Second
	// PanicThresholdPercentageMin and Max bound the panic threshold annotation.
	PanicThresholdPercentageMin = 110.0
	PanicThresholdPercentageMax = 1000.0
	// ScaleDownDelayMax bounds the scale-down-delay annotation.
	ScaleDownDelayMax = time.Hour
	// RetentionPeriodMax bounds the pod retention annotation.
	RetentionPeriodMax = time.Hour
)

// Pod autoscaler classes.
const (
	ClassKPA = "kpa.autoscaling.knative.dev"
	ClassHPA = "hpa.autoscaling.knative.dev"
)

// KeepAlive is how a KPA target that may scale to zero keeps its last pod
// once idle.
type KeepAlive uint8

const (
	// KeepAliveFixed is Knative's: the stable window, then the fixed
	// scale-to-zero grace and pod retention.
	KeepAliveFixed KeepAlive = iota
	// KeepAlivePredictive learns the target's idle times and, when they are
	// predictable, scales to zero soon after a busy period and pre-warms a
	// pod before the next request is due (decider/keepalive); otherwise it
	// is KeepAliveFixed.
	KeepAlivePredictive
)

// Keep-alive values, of KeyKeepAlive and AnnotationKeepAlive.
const (
	KeepAliveFixedValue      = "fixed"
	KeepAlivePredictiveValue = "predictive"
)

func (k KeepAlive) String() string {
	if k == KeepAlivePredictive {
		return KeepAlivePredictiveValue
	}
	return KeepAliveFixedValue
}

func parseKeepAlive(key, v string) (KeepAlive, error) {
	switch strings.TrimSpace(v) {
	case KeepAliveFixedValue:
		return KeepAliveFixed, nil
	case KeepAlivePredictiveValue:
		return KeepAlivePredictive, nil
	}
	return 0, keyErr(key, v, "want %s or %s", KeepAliveFixedValue, KeepAlivePredictiveValue)
}

// Config is a parsed and validated config-autoscaler ConfigMap.
type Config struct {
	// ContainerConcurrencyTargetFraction is the target utilisation of
	// containerConcurrency, as a fraction in (0, 1].
	ContainerConcurrencyTargetFraction float64
	// ContainerConcurrencyTargetDefault is the per-pod concurrency when
	// containerConcurrency is 0.
	ContainerConcurrencyTargetDefault float64
	// RPSTargetDefault is the per-pod requests per second for the rps metric.
	RPSTargetDefault float64
	// TargetUtilization is the rps metric's utilisation; it has no key.
	TargetUtilization float64
	// TargetBurstCapacity is the spare capacity to keep; -1 means unlimited.
	TargetBurstCapacity float64
	// StableWindow is the stable averaging window.
	StableWindow time.Duration
	// PanicWindowPercentage is the panic window as a percentage of the stable.
	PanicWindowPercentage float64
	// PanicThresholdPercentage is the panic entry ratio in percent.
	PanicThresholdPercentage float64
	// MaxScaleUpRate and MaxScaleDownRate bound one step's change.
	MaxScaleUpRate   float64
	MaxScaleDownRate float64
	// EnableScaleToZero allows scaling to zero.
	EnableScaleToZero bool
	// ScaleToZeroGracePeriod is the longest wait for the activator to be in
	// the path before the last pod goes.
	ScaleToZeroGracePeriod time.Duration
	// ScaleToZeroPodRetentionPeriod keeps the last pod this long after the
	// target went inactive.
	ScaleToZeroPodRetentionPeriod time.Duration
	// ScaleDownDelay holds scale-downs for this long.
	ScaleDownDelay time.Duration
	// ActivatorCapacity is one activator's request capacity.
	ActivatorCapacity float64
	// InitialScale is a new revision's scale; AllowZeroInitialScale permits 0.
	InitialScale          int32
	AllowZeroInitialScale bool
	// MinScale and MaxScale are the cluster-wide bounds; MaxScale 0 means
	// unbounded. MaxScaleLimit caps every max-scale; 0 means none.
	MinScale      int32
	MaxScale      int32
	MaxScaleLimit int32
	// PodAutoscalerClass is the default class.
	PodAutoscalerClass string
	// KeepAlive is the default of targets without AnnotationKeepAlive.
	KeepAlive KeepAlive
}

// Default returns Knative's defaults (config/core/configmaps/autoscaler.yaml
// and pkg/autoscaler/config/config.go at knative-v1.23).
func Default() Config {
	return Config{
		ContainerConcurrencyTargetFraction: 0.7, // 70 %
		ContainerConcurrencyTargetDefault:  100, // requests per pod
		RPSTargetDefault:                   200, // requests per second per pod
		TargetUtilization:                  0.7, // rps utilisation, no key
		TargetBurstCapacity:                211, // 211 requests
		StableWindow:                       60 * time.Second,
		PanicWindowPercentage:              10,   // 6 s of 60 s
		PanicThresholdPercentage:           200,  // 2× the ready pods
		MaxScaleUpRate:                     1000, // ×1000 per tick
		MaxScaleDownRate:                   2,    // ÷2 per tick
		EnableScaleToZero:                  true,
		ScaleToZeroGracePeriod:             30 * time.Second,
		ScaleToZeroPodRetentionPeriod:      0,
		ScaleDownDelay:                     0,
		ActivatorCapacity:                  100, // requests per activator
		InitialScale:                       1,
		AllowZeroInitialScale:              false,
		MinScale:                           0,
		MaxScale:                           0, // unbounded
		MaxScaleLimit:                      0, // none
		PodAutoscalerClass:                 ClassKPA,
		KeepAlive:                          KeepAliveFixed,
	}
}

// KeyError is a refused key and value.
type KeyError struct {
	Key   string
	Value string
	// Reason says what was wanted.
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("%s %s: %s", keyName(e.Key), quotePrefix(e.Value), e.Reason)
}

// quotePrefix quotes at most the first 64 bytes of a value, so an error
// never carries a tenant's whole annotation into status, Events and logs.
func quotePrefix(v string) string {
	const n = 64
	if len(v) <= n {
		return strconv.Quote(v)
	}
	return strconv.Quote(v[:n]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// keyName is a key as an error shows it: as it is when plain and no longer
// than an annotation key may be (253-byte prefix, '/', 63-byte name), else
// quoted and cut like a value: an unknown annotation's key is the tenant's.
func keyName(k string) string {
	plain := k != "" && len(k) <= 317 && !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f })
	if plain {
		return k
	}
	return quotePrefix(k)
}

func keyErr(key, value, format string, args ...any) error {
	return &KeyError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)}
}

func parseFloat(key, v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, keyErr(key, v, "want a finite number")
	}
	return f, nil
}

func parseInt32(key, v string) (int32, error) {
	i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0, keyErr(key, v, "want an integer")
	}
	return int32(i), nil
}

func parseBool(key, v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, keyErr(key, v, "want true or false")
}

func parseDuration(key, v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, keyErr(key, v, "want a duration such as 30s")
	}
	return d, nil
}

func wholeSeconds(d time.Duration) bool { return d%time.Second == 0 }

// ParseConfig parses a config-autoscaler ConfigMap's data over Default and
// validates the result. Unknown keys are ignored, as Knative ignores them.
func ParseConfig(data map[string]string) (Config, error) {
	c := Default()
	floats := []struct {
		key string
		dst *float64
	}{
		{KeyContainerConcurrencyTargetPercentage, &c.ContainerConcurrencyTargetFraction},
		{KeyContainerConcurrencyTargetDefault, &c.ContainerConcurrencyTargetDefault},
		{KeyRPSTargetDefault, &c.RPSTargetDefault},
		{KeyTargetBurstCapacity, &c.TargetBurstCapacity},
		{KeyPanicWindowPercentage, &c.PanicWindowPercentage},
		{KeyPanicThresholdPercentage, &c.PanicThresholdPercentage},
		{KeyMaxScaleUpRate, &c.MaxScaleUpRate},
		{KeyMaxScaleDownRate, &c.MaxScaleDownRate},
		{KeyActivatorCapacity, &c.ActivatorCapacity},
	}
	for _, f := range floats {
		if v, ok := data[f.key]; ok {
			x, err := parseFloat(f.key, v)
			if err != nil {
				return Config{}, err
			}
			*f.dst = x
		}
	}
	durations := []struct {
		key string
		dst *time.Duration
	}{
		{KeyStableWindow, &c.StableWindow},
		{KeyScaleToZeroGracePeriod, &c.ScaleToZeroGracePeriod},
		{KeyScaleToZeroPodRetentionPeriod, &c.ScaleToZeroPodRetentionPeriod},
		{KeyScaleDownDelay, &c.ScaleDownDelay},
	}
	for _, f := range durations {
		if v, ok := data[f.key]; ok {
			x, err := parseDuration(f.key, v)
			if err != nil {
				return Config{}, err
			}
			*f.dst = x
		}
	}
	ints := []struct {
		key string
		dst *int32
	}{
		{KeyInitialScale, &c.InitialScale},
		{KeyMinScale, &c.MinScale},
		{KeyMaxScale, &c.MaxScale},
		{KeyMaxScaleLimit, &c.MaxScaleLimit},
	}
	for _, f := range ints {
		if v, ok := data[f.key]; ok {
			x, err := parseInt32(f.key, v)
			if err != nil {
				return Config{}, err
			}
			*f.dst = x
		}
	}
	bools := []struct {
		key string
		dst *bool
	}{
		{KeyEnableScaleToZero, &c.EnableScaleToZero},
		{KeyAllowZeroInitialScale, &c.AllowZeroInitialScale},
	}
	for _, f := range bools {
		if v, ok := data[f.key]; ok {
			x, err := parseBool(f.key, v)
			if err != nil {
				return Config{}, err
			}
			*f.dst = x
		}
	}
	if v, ok := data[KeyPodAutoscalerClass]; ok {
		c.PodAutoscalerClass = strings.TrimSpace(v)
	}
	if v, ok := data[KeyKeepAlive]; ok {
		k, err := parseKeepAlive(KeyKeepAlive, v)
		if err != nil {
			return Config{}, err
		}
		c.KeepAlive = k
	}
	// Percentages above 1 are read as percent, values in (0, 1] as fractions
	// (a legacy form Knative keeps).
	if c.ContainerConcurrencyTargetFraction > 1 {
		c.ContainerConcurrencyTargetFraction /= 100
	}
	if err := c.validate(data); err != nil {
		return Config{}, err
	}
	return c, nil
}

// validate applies Knative's ranges; data supplies the raw values for the
// error messages.
func (c *Config) validate(data map[string]string) error {
	raw := func(key string, v any) string {
		if s, ok := data[key]; ok {
			return s
		}
		return fmt.Sprint(v)
	}
	switch {
	case c.ContainerConcurrencyTargetFraction <= 0 || c.ContainerConcurrencyTargetFraction > 1:
		return keyErr(KeyContainerConcurrencyTargetPercentage, raw(KeyContainerConcurrencyTargetPercentage, c.ContainerConcurrencyTargetFraction*100), "want a percentage in (0, 100]")
	case c.ContainerConcurrencyTargetDefault*c.ContainerConcurrencyTargetFraction < TargetMin:
		return keyErr(KeyContainerConcurrencyTargetDefault, raw(KeyContainerConcurrencyTargetDefault, c.ContainerConcurrencyTargetDefault),
			"with %s %v the per-pod target is %v, want at least %v", KeyContainerConcurrencyTargetPercentage, c.ContainerConcurrencyTargetFraction*100,
			c.ContainerConcurrencyTargetDefault*c.ContainerConcurrencyTargetFraction, TargetMin)
	case c.RPSTargetDefault < TargetMin:
		return keyErr(KeyRPSTargetDefault, raw(KeyRPSTargetDefault, c.RPSTargetDefault), "want at least %v", TargetMin)
	case c.TargetBurstCapacity < 0 && c.TargetBurstCapacity != -1:
		return keyErr(KeyTargetBurstCapacity, raw(KeyTargetBurstCapacity, c.TargetBurstCapacity), "want ≥ 0 or exactly -1")
	case c.StableWindow < WindowMin || c.StableWindow > WindowMax:
		return keyErr(KeyStableWindow, raw(KeyStableWindow, c.StableWindow), "want a window in [%v, %v]", WindowMin, WindowMax)
	case !wholeSeconds(c.StableWindow):
		return keyErr(KeyStableWindow, raw(KeyStableWindow, c.StableWindow), "want whole seconds")
	case c.PanicWindowPercentage < 1 || c.PanicWindowPercentage > 100:
		return keyErr(KeyPanicWindowPercentage, raw(KeyPanicWindowPercentage, c.PanicWindowPercentage), "want a percentage in [1, 100]")
	case c.PanicThresholdPercentage <= 0:
		// Knative does not range-check this key; a threshold ≤ 0 would make
		// every tick panic, so tidal refuses it.
		return keyErr(KeyPanicThresholdPercentage, raw(KeyPanicThresholdPercentage, c.PanicThresholdPercentage), "want a percentage > 0")
	case c.MaxScaleUpRate <= 1:
		return keyErr(KeyMaxScaleUpRate, raw(KeyMaxScaleUpRate, c.MaxScaleUpRate), "want a rate > 1")
	case c.MaxScaleDownRate <= 1:
		return keyErr(KeyMaxScaleDownRate, raw(KeyMaxScaleDownRate, c.MaxScaleDownRate), "want a rate > 1")
	case c.ScaleToZeroGracePeriod <= 0:
		return keyErr(KeyScaleToZeroGracePeriod, raw(KeyScaleToZeroGracePeriod, c.ScaleToZeroGracePeriod), "want a duration > 0s")
	case c.ScaleToZeroPodRetentionPeriod < 0:
		return keyErr(KeyScaleToZeroPodRetentionPeriod, raw(KeyScaleToZeroPodRetentionPeriod, c.ScaleToZeroPodRetentionPeriod), "want a duration ≥ 0s")
	case c.ScaleDownDelay < 0:
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "want a duration ≥ 0s")
	case c.ScaleDownDelay > ScaleDownDelayMax:
		// Knative's config has no upper bound, but its annotation stops at
		// 1 h and so does the delay window tidal keeps per target.
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "want at most %v", ScaleDownDelayMax)
	case !wholeSeconds(c.ScaleDownDelay):
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "want whole seconds")
	case c.ActivatorCapacity < 1:
		return keyErr(KeyActivatorCapacity, raw(KeyActivatorCapacity, c.ActivatorCapacity), "want at least 1")
	case c.InitialScale < 0 || (c.InitialScale == 0 && !c.AllowZeroInitialScale):
		return keyErr(KeyInitialScale, raw(KeyInitialScale, c.InitialScale), "want ≥ 1, or ≥ 0 with %s true", KeyAllowZeroInitialScale)
	case c.MaxScaleLimit < 0:
		return keyErr(KeyMaxScaleLimit, raw(KeyMaxScaleLimit, c.MaxScaleLimit), "want ≥ 0")
	case c.MaxScale < 0 || (c.MaxScaleLimit > 0 && (c.MaxScale < 1 || c.MaxScale > c.MaxScaleLimit)):
		if c.MaxScaleLimit > 0 {
			return keyErr(KeyMaxScale, raw(KeyMaxScale, c.MaxScale), "want a value in [1, %s %d]", KeyMaxScaleLimit, c.MaxScaleLimit)
		}
		return keyErr(KeyMaxScale, raw(KeyMaxScale, c.MaxScale), "want ≥ 0")
	case c.MinScale < 0 || (c.MaxScale > 0 && c.MinScale > c.MaxScale):
		return keyErr(KeyMinScale, raw(KeyMinScale, c.MinScale), "want ≥ 0 and at most %s %d", KeyMaxScale, c.MaxScale)
	case c.PodAutoscalerClass == "":
		return keyErr(KeyPodAutoscalerClass, raw(KeyPodAutoscalerClass, ""), "want a class name")
	}
	return nil
}

// DeploymentConfig is the part of config-deployment the KPA reads.
type DeploymentConfig struct {
	// ProgressDeadline bounds a rollout; activation times out 30 s after it.
	ProgressDeadline time.Duration
}

// DefaultDeployment returns Knative's config-deployment default (600 s).
func DefaultDeployment() DeploymentConfig {
	return DeploymentConfig{ProgressDeadline: 600 * time.Second}
}

// ParseDeploymentConfig parses config-deployment's progress-deadline.
func ParseDeploymentConfig(data map[string]string) (DeploymentConfig, error) {
	c := DefaultDeployment()
	if v, ok := data[KeyProgressDeadline]; ok {
		d, err := parseDuration(KeyProgressDeadline, v)
		if err != nil {
			return DeploymentConfig{}, err
		}
		if d <= 0 || !wholeSeconds(d) {
			return DeploymentConfig{}, keyErr(KeyProgressDeadline, v, "want whole seconds > 0s")
		}
		c.ProgressDeadline = d
	}
	return c, nil
}
