package kpaconfig

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
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

// keepAlive reads a keep-alive value (surrounding space allowed: the key
// is tidal's own).
var keepAlive = func() keyval.Parser[KeepAlive] {
	p := keyval.OneOf(map[string]KeepAlive{KeepAliveFixedValue: KeepAliveFixed, KeepAlivePredictiveValue: KeepAlivePredictive})
	return func(sp keyval.Spelling, v string) (KeepAlive, error) { return p(sp, strings.TrimSpace(v)) }
}()

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
type KeyError = keyval.Error

func keyErr(key, value, format string, args ...any) error {
	return keyval.Refuse(key, value, format, args...)
}

func wholeSeconds(d time.Duration) bool { return d%time.Second == 0 }

// configKeys are config-autoscaler's keys, read as Knative reads them
// (pkg/autoscaler/config/config.go); their ranges are checked together,
// by validate.
var configKeys = keyval.New(keyval.Knative,
	floatKey(KeyContainerConcurrencyTargetPercentage, func(c *Config) *float64 { return &c.ContainerConcurrencyTargetFraction }),
	floatKey(KeyContainerConcurrencyTargetDefault, func(c *Config) *float64 { return &c.ContainerConcurrencyTargetDefault }),
	floatKey(KeyRPSTargetDefault, func(c *Config) *float64 { return &c.RPSTargetDefault }),
	floatKey(KeyTargetBurstCapacity, func(c *Config) *float64 { return &c.TargetBurstCapacity }),
	floatKey(KeyPanicWindowPercentage, func(c *Config) *float64 { return &c.PanicWindowPercentage }),
	floatKey(KeyPanicThresholdPercentage, func(c *Config) *float64 { return &c.PanicThresholdPercentage }),
	floatKey(KeyMaxScaleUpRate, func(c *Config) *float64 { return &c.MaxScaleUpRate }),
	floatKey(KeyMaxScaleDownRate, func(c *Config) *float64 { return &c.MaxScaleDownRate }),
	floatKey(KeyActivatorCapacity, func(c *Config) *float64 { return &c.ActivatorCapacity }),
	durationKey(KeyStableWindow, func(c *Config) *time.Duration { return &c.StableWindow }),
	durationKey(KeyScaleToZeroGracePeriod, func(c *Config) *time.Duration { return &c.ScaleToZeroGracePeriod }),
	durationKey(KeyScaleToZeroPodRetentionPeriod, func(c *Config) *time.Duration { return &c.ScaleToZeroPodRetentionPeriod }),
	durationKey(KeyScaleDownDelay, func(c *Config) *time.Duration { return &c.ScaleDownDelay }),
	intKey(KeyInitialScale, func(c *Config) *int32 { return &c.InitialScale }),
	intKey(KeyMinScale, func(c *Config) *int32 { return &c.MinScale }),
	intKey(KeyMaxScale, func(c *Config) *int32 { return &c.MaxScale }),
	intKey(KeyMaxScaleLimit, func(c *Config) *int32 { return &c.MaxScaleLimit }),
	boolKey(KeyEnableScaleToZero, func(c *Config) *bool { return &c.EnableScaleToZero }),
	boolKey(KeyAllowZeroInitialScale, func(c *Config) *bool { return &c.AllowZeroInitialScale }),
	keyval.Set(KeyPodAutoscalerClass, keyval.Text(), func(c *Config, v string) { c.PodAutoscalerClass = strings.TrimSpace(v) }),
	keyval.Set(KeyKeepAlive, keepAlive, func(c *Config, k KeepAlive) { c.KeepAlive = k }),
)

func floatKey(key string, field func(*Config) *float64) keyval.Key[Config] {
	return keyval.Set(key, keyval.Float(), func(c *Config, x float64) { *field(c) = x })
}

func durationKey(key string, field func(*Config) *time.Duration) keyval.Key[Config] {
	return keyval.Set(key, keyval.Duration(false), func(c *Config, x time.Duration) { *field(c) = x })
}

func intKey(key string, field func(*Config) *int32) keyval.Key[Config] {
	return keyval.Set(key, keyval.Int[int32](math.MinInt32, math.MaxInt32), func(c *Config, x int32) { *field(c) = x })
}

func boolKey(key string, field func(*Config) *bool) keyval.Key[Config] {
	return keyval.Set(key, keyval.Bool(), func(c *Config, x bool) { *field(c) = x })
}

// ParseConfig parses a config-autoscaler ConfigMap's data over Default and
// validates the result. Unknown keys are ignored, as Knative ignores them.
func ParseConfig(data map[string]string) (Config, error) {
	c := Default()
	if _, err := configKeys.Parse(&c, data); err != nil {
		return Config{}, err
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
		return keyErr(KeyContainerConcurrencyTargetPercentage, raw(KeyContainerConcurrencyTargetPercentage, c.ContainerConcurrencyTargetFraction*100), "a percentage in (0, 100]")
	case c.ContainerConcurrencyTargetDefault*c.ContainerConcurrencyTargetFraction < TargetMin:
		return keyErr(KeyContainerConcurrencyTargetDefault, raw(KeyContainerConcurrencyTargetDefault, c.ContainerConcurrencyTargetDefault),
			"with %s %v the per-pod target is %v, want at least %v", KeyContainerConcurrencyTargetPercentage, c.ContainerConcurrencyTargetFraction*100,
			c.ContainerConcurrencyTargetDefault*c.ContainerConcurrencyTargetFraction, TargetMin)
	case c.RPSTargetDefault < TargetMin:
		return keyErr(KeyRPSTargetDefault, raw(KeyRPSTargetDefault, c.RPSTargetDefault), "at least %v", TargetMin)
	case c.TargetBurstCapacity < 0 && c.TargetBurstCapacity != -1:
		return keyErr(KeyTargetBurstCapacity, raw(KeyTargetBurstCapacity, c.TargetBurstCapacity), "≥ 0 or exactly -1")
	case c.StableWindow < WindowMin || c.StableWindow > WindowMax:
		return keyErr(KeyStableWindow, raw(KeyStableWindow, c.StableWindow), "a window in [%v, %v]", WindowMin, WindowMax)
	case !wholeSeconds(c.StableWindow):
		return keyErr(KeyStableWindow, raw(KeyStableWindow, c.StableWindow), "whole seconds")
	case c.PanicWindowPercentage < 1 || c.PanicWindowPercentage > 100:
		return keyErr(KeyPanicWindowPercentage, raw(KeyPanicWindowPercentage, c.PanicWindowPercentage), "a percentage in [1, 100]")
	case c.PanicThresholdPercentage <= 0:
		// Knative does not range-check this key; a threshold ≤ 0 would make
		// every tick panic, so tidal refuses it.
		return keyErr(KeyPanicThresholdPercentage, raw(KeyPanicThresholdPercentage, c.PanicThresholdPercentage), "a percentage > 0")
	case c.MaxScaleUpRate <= 1:
		return keyErr(KeyMaxScaleUpRate, raw(KeyMaxScaleUpRate, c.MaxScaleUpRate), "a rate > 1")
	case c.MaxScaleDownRate <= 1:
		return keyErr(KeyMaxScaleDownRate, raw(KeyMaxScaleDownRate, c.MaxScaleDownRate), "a rate > 1")
	case c.ScaleToZeroGracePeriod <= 0:
		return keyErr(KeyScaleToZeroGracePeriod, raw(KeyScaleToZeroGracePeriod, c.ScaleToZeroGracePeriod), "a duration > 0s")
	case c.ScaleToZeroPodRetentionPeriod < 0:
		return keyErr(KeyScaleToZeroPodRetentionPeriod, raw(KeyScaleToZeroPodRetentionPeriod, c.ScaleToZeroPodRetentionPeriod), "a duration ≥ 0s")
	case c.ScaleDownDelay < 0:
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "a duration ≥ 0s")
	case c.ScaleDownDelay > ScaleDownDelayMax:
		// Knative's config has no upper bound, but its annotation stops at
		// 1 h and so does the delay window tidal keeps per target.
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "at most %v", ScaleDownDelayMax)
	case !wholeSeconds(c.ScaleDownDelay):
		return keyErr(KeyScaleDownDelay, raw(KeyScaleDownDelay, c.ScaleDownDelay), "whole seconds")
	case c.ActivatorCapacity < 1:
		return keyErr(KeyActivatorCapacity, raw(KeyActivatorCapacity, c.ActivatorCapacity), "at least 1")
	case c.InitialScale < 0 || (c.InitialScale == 0 && !c.AllowZeroInitialScale):
		return keyErr(KeyInitialScale, raw(KeyInitialScale, c.InitialScale), "≥ 1, or ≥ 0 with %s true", KeyAllowZeroInitialScale)
	case c.MaxScaleLimit < 0:
		return keyErr(KeyMaxScaleLimit, raw(KeyMaxScaleLimit, c.MaxScaleLimit), "≥ 0")
	case c.MaxScale < 0 || (c.MaxScaleLimit > 0 && (c.MaxScale < 1 || c.MaxScale > c.MaxScaleLimit)):
		if c.MaxScaleLimit > 0 {
			return keyErr(KeyMaxScale, raw(KeyMaxScale, c.MaxScale), "a value in [1, %s %d]", KeyMaxScaleLimit, c.MaxScaleLimit)
		}
		return keyErr(KeyMaxScale, raw(KeyMaxScale, c.MaxScale), "≥ 0")
	case c.MinScale < 0 || (c.MaxScale > 0 && c.MinScale > c.MaxScale):
		return keyErr(KeyMinScale, raw(KeyMinScale, c.MinScale), "≥ 0 and at most %s %d", KeyMaxScale, c.MaxScale)
	case c.PodAutoscalerClass == "":
		return keyErr(KeyPodAutoscalerClass, raw(KeyPodAutoscalerClass, ""), "a class name")
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

var deploymentKeys = keyval.New(keyval.Knative,
	keyval.Set(KeyProgressDeadline, keyval.Duration(true, keyval.Check[time.Duration]{OK: func(d time.Duration) bool { return d > 0 }, Want: "a duration > 0s"}),
		func(c *DeploymentConfig, d time.Duration) { c.ProgressDeadline = d }))

// ParseDeploymentConfig parses config-deployment's progress-deadline.
func ParseDeploymentConfig(data map[string]string) (DeploymentConfig, error) {
	c := DefaultDeployment()
	_, err := deploymentKeys.Parse(&c, data)
	return c, err
}
