package kpaconfig

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaspec"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Errorf("ParseConfig(nil) = %+v, want Default()", c)
	}
	if c.TargetBurstCapacity != 211 || c.StableWindow != time.Minute || c.ContainerConcurrencyTargetFraction != 0.7 {
		t.Errorf("defaults drifted from Knative's: %+v", c)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(map[string]string{
		KeyContainerConcurrencyTargetPercentage: "80",
		KeyStableWindow:                         "2m",
		KeyMaxScaleUpRate:                       "2",
		KeyMaxScaleDownRate:                     "1.5",
		KeyEnableScaleToZero:                    "false",
		KeyScaleDownDelay:                       "20s",
		KeyMaxScaleLimit:                        "10",
		KeyMaxScale:                             "10",
		KeyMinScale:                             "2",
		KeyTargetBurstCapacity:                  "-1",
		"tick-interval":                         "not parsed",
		"_example":                              "ignored",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.ContainerConcurrencyTargetFraction != 0.8 || c.StableWindow != 2*time.Minute || c.EnableScaleToZero ||
		c.ScaleDownDelay != 20*time.Second || c.MaxScale != 10 || c.MinScale != 2 || c.TargetBurstCapacity != -1 {
		t.Errorf("ParseConfig = %+v", c)
	}
	// A fraction in (0, 1] is read as a fraction.
	if c, err := ParseConfig(map[string]string{KeyContainerConcurrencyTargetPercentage: "0.5"}); err != nil || c.ContainerConcurrencyTargetFraction != 0.5 {
		t.Errorf("fraction 0.5: %v %v", c.ContainerConcurrencyTargetFraction, err)
	}
}

func TestParseConfigRefusesBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
		extra      map[string]string
	}{
		{key: KeyContainerConcurrencyTargetPercentage, value: "0"},
		{key: KeyContainerConcurrencyTargetPercentage, value: "101"},
		{key: KeyContainerConcurrencyTargetPercentage, value: "NaN"},
		{key: KeyContainerConcurrencyTargetDefault, value: "0.001"},
		{key: KeyRPSTargetDefault, value: "0"},
		{key: KeyTargetBurstCapacity, value: "-2"},
		{key: KeyTargetBurstCapacity, value: "+Inf"},
		{key: KeyStableWindow, value: "5s"},
		{key: KeyStableWindow, value: "2h"},
		{key: KeyStableWindow, value: "60.5s"},
		{key: KeyStableWindow, value: "sixty"},
		{key: KeyPanicWindowPercentage, value: "0.5"},
		{key: KeyPanicWindowPercentage, value: "101"},
		{key: KeyPanicThresholdPercentage, value: "-1"},
		{key: KeyMaxScaleUpRate, value: "1"},
		{key: KeyMaxScaleDownRate, value: "0.9"},
		{key: KeyEnableScaleToZero, value: "yes please"},
		{key: KeyScaleToZeroGracePeriod, value: "0s"},
		{key: KeyScaleToZeroPodRetentionPeriod, value: "-1s"},
		{key: KeyScaleDownDelay, value: "-1s"},
		{key: KeyScaleDownDelay, value: "1.5s"},
		{key: KeyActivatorCapacity, value: "0.5"},
		{key: KeyInitialScale, value: "0"},
		{key: KeyInitialScale, value: "-1", extra: map[string]string{KeyAllowZeroInitialScale: "true"}},
		{key: KeyInitialScale, value: "1.5"},
		{key: KeyMinScale, value: "-1"},
		{key: KeyMinScale, value: "5", extra: map[string]string{KeyMaxScale: "3"}},
		{key: KeyMaxScale, value: "-1"},
		{key: KeyMaxScale, value: "0", extra: map[string]string{KeyMaxScaleLimit: "10"}},
		{key: KeyMaxScale, value: "11", extra: map[string]string{KeyMaxScaleLimit: "10"}},
		{key: KeyMaxScaleLimit, value: "-1"},
		{key: KeyAllowZeroInitialScale, value: "maybe"},
		{key: KeyPodAutoscalerClass, value: " "},
		{key: KeyKeepAlive, value: "always"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			data := map[string]string{tt.key: tt.value}
			for k, v := range tt.extra {
				data[k] = v
			}
			_, err := ParseConfig(data)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("ParseConfig = %v, want a *KeyError", err)
			}
			if ke.Key != tt.key || ke.Value != tt.value {
				t.Errorf("error names %s %q, want %s %q (%v)", ke.Key, ke.Value, tt.key, tt.value, err)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Errorf("error %q does not name the key", err)
			}
		})
	}
}

func TestParseDeploymentConfig(t *testing.T) {
	t.Parallel()
	if c, err := ParseDeploymentConfig(nil); err != nil || c.ProgressDeadline != 600*time.Second {
		t.Errorf("default = %v %v", c, err)
	}
	for _, v := range []string{"0s", "-5s", "1.5s", "ten minutes"} {
		if _, err := ParseDeploymentConfig(map[string]string{KeyProgressDeadline: v}); err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("progress-deadline %q: %v, want an error naming it", v, err)
		}
	}
}

func TestParseAnnotations(t *testing.T) {
	t.Parallel()
	cfg := Default()
	a, err := ParseAnnotations(map[string]string{
		AnnotationClass:                        ClassKPA,
		AnnotationMetric:                       "rps",
		AnnotationTarget:                       "10",
		Prefix + "targetUtilizationPercentage": "50",
		AnnotationWindow:                       "20s",
		AnnotationPanicThresholdPercentage:     "300",
		Prefix + "panicThresholdPercentage":    "999", // kebab-case wins
		AnnotationMetricAggregationAlgorithm:   "weightedExponential",
		AnnotationProgressDeadline:             "20s",
		"serving.knative.dev/creator":          "someone", // other groups are not ours
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if *a.Metric != kpaspec.RPS || *a.Target != 10 || *a.TargetUtilizationPercentage != 50 || *a.Window != 20*time.Second ||
		*a.PanicThresholdPercentage != 300 || *a.Aggregation != kpaspec.WeightedExponential || *a.ProgressDeadline != 20*time.Second {
		t.Errorf("ParseAnnotations = %+v", a)
	}
}

func TestParseAnnotationsRefusesBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
		extra      map[string]string
		cfg        map[string]string
	}{
		{key: Prefix + "panic-window", value: "6s"},
		{key: Prefix + "no-such-key", value: "1"},
		{key: AnnotationClass, value: "foo.knative.dev"},
		{key: AnnotationMetric, value: "cpu"},
		{key: AnnotationTarget, value: "0"},
		{key: AnnotationTarget, value: "-5"},
		{key: AnnotationTarget, value: "NaN"},
		{key: AnnotationTarget, value: "Inf"},
		{key: AnnotationTargetUtilizationPercentage, value: "0.5"},
		{key: Prefix + "targetUtilizationPercentage", value: "101"},
		{key: AnnotationTargetBurstCapacity, value: "-3"},
		{key: AnnotationWindow, value: "5s"},
		{key: AnnotationWindow, value: "61m"},
		{key: AnnotationWindow, value: "6500ms"},
		{key: AnnotationPanicWindowPercentage, value: "0"},
		{key: AnnotationPanicThresholdPercentage, value: "109"},
		{key: AnnotationPanicThresholdPercentage, value: "1001"},
		{key: AnnotationMinScale, value: "-1"},
		{key: AnnotationMinScale, value: "one"},
		{key: AnnotationMinScale, value: "4", extra: map[string]string{AnnotationMaxScale: "3"}},
		{key: AnnotationMaxScale, value: "0", cfg: map[string]string{KeyMaxScaleLimit: "5", KeyMaxScale: "5"}},
		{key: AnnotationMaxScale, value: "6", cfg: map[string]string{KeyMaxScaleLimit: "5", KeyMaxScale: "5"}},
		{key: AnnotationInitialScale, value: "0"},
		{key: AnnotationInitialScale, value: "-1", cfg: map[string]string{KeyAllowZeroInitialScale: "true"}},
		{key: AnnotationActivationScale, value: "1"},
		{key: AnnotationActivationScale, value: "2", extra: map[string]string{AnnotationMinScale: "3"}},
		{key: AnnotationActivationScale, value: "5", extra: map[string]string{AnnotationMaxScale: "4"}},
		{key: AnnotationScaleDownDelay, value: "-1s"},
		{key: Prefix + "scaleDownDelay", value: "2h"},
		{key: AnnotationScaleDownDelay, value: "0.5s"},
		{key: AnnotationScaleToZeroPodRetentionPeriod, value: "2h"},
		{key: AnnotationMetricAggregationAlgorithm, value: "exponential"},
		{key: AnnotationProgressDeadline, value: "0s"},
		{key: AnnotationKeepAlive, value: "Predictive"},
		{key: AnnotationKeepAlive, value: ""},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			cfg, err := ParseConfig(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ann := map[string]string{tt.key: tt.value}
			for k, v := range tt.extra {
				ann[k] = v
			}
			_, err = ParseAnnotations(ann, cfg)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("ParseAnnotations = %v, want a *KeyError", err)
			}
			if ke.Key != tt.key || ke.Value != tt.value {
				t.Errorf("error names %s %q, want %s %q (%v)", ke.Key, ke.Value, tt.key, tt.value, err)
			}
		})
	}
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		cfg, ann   map[string]string
		keepAlive  KeepAlive
		predictive bool
	}{
		{name: "default", keepAlive: KeepAliveFixed},
		{name: "annotation", ann: map[string]string{AnnotationKeepAlive: "predictive"}, keepAlive: KeepAlivePredictive, predictive: true},
		{name: "cluster default", cfg: map[string]string{KeyKeepAlive: "predictive"}, keepAlive: KeepAlivePredictive, predictive: true},
		{name: "annotation over the default", cfg: map[string]string{KeyKeepAlive: "predictive"}, ann: map[string]string{AnnotationKeepAlive: "fixed"}, keepAlive: KeepAliveFixed},
		{name: "min-scale keeps precedence", ann: map[string]string{AnnotationKeepAlive: "predictive", AnnotationMinScale: "1"}, keepAlive: KeepAlivePredictive},
		{name: "no scale to zero", cfg: map[string]string{KeyEnableScaleToZero: "false"}, ann: map[string]string{AnnotationKeepAlive: "predictive"}, keepAlive: KeepAlivePredictive},
		{name: "cluster min-scale", cfg: map[string]string{KeyMinScale: "2", KeyKeepAlive: "predictive"}, keepAlive: KeepAlivePredictive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := NewRevision(cfg, DefaultDeployment(), tc.ann, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := rev.KeepAlive(); got != tc.keepAlive {
				t.Errorf("KeepAlive() = %s, want %s", got, tc.keepAlive)
			}
			if got := rev.Predictive(); got != tc.predictive {
				t.Errorf("Predictive() = %v, want %v", got, tc.predictive)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	cfg := Default()
	tests := []struct {
		name          string
		ann           map[string]string
		cc            int64
		target, total float64
		panicWindow   time.Duration
	}{
		{"CC 10", nil, 10, 7, 10, 6 * time.Second},
		{"CC 0", nil, 0, 70, 100, 6 * time.Second},
		{"rps target 10", map[string]string{AnnotationMetric: "rps", AnnotationTarget: "10"}, 0, 7, 10, 6 * time.Second},
		{"CC 20 at 50 %", map[string]string{AnnotationTargetUtilizationPercentage: "50"}, 20, 10, 20, 6 * time.Second},
		{"target capped by CC", map[string]string{AnnotationTarget: "50"}, 10, 7, 10, 6 * time.Second},
		{"tiny target floors at 0.01", map[string]string{AnnotationTarget: "0.01", AnnotationTargetUtilizationPercentage: "1"}, 0, 0.01, 0.01, 6 * time.Second},
		{"6 s window: panic 0.6 s rounds to 1 s", map[string]string{AnnotationWindow: "6s"}, 0, 70, 100, time.Second},
		{"15 s at 10 %: 1.5 s rounds away from zero", map[string]string{AnnotationWindow: "15s"}, 0, 70, 100, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := NewRevision(cfg, DefaultDeployment(), tt.ann, tt.cc, true)
			if err != nil {
				t.Fatal(err)
			}
			s := rev.DeciderSpec()
			if s.TargetValue != tt.target || s.TotalValue != tt.total || s.MetricPanicWindow != tt.panicWindow {
				t.Errorf("target %v total %v panic window %v, want %v %v %v", s.TargetValue, s.TotalValue, s.MetricPanicWindow, tt.target, tt.total, tt.panicWindow)
			}
			if err := s.Validate(); err != nil {
				t.Errorf("resolved spec invalid: %v", err)
			}
		})
	}
	if _, err := NewRevision(cfg, DefaultDeployment(), nil, -1, true); err == nil {
		t.Error("containerConcurrency -1 accepted")
	}
	rev, _ := NewRevision(cfg, DefaultDeployment(), map[string]string{AnnotationMinScale: "3", AnnotationInitialScale: "5"}, 0, false)
	if lo, _ := rev.ScaleBounds(); lo != 0 {
		t.Errorf("unreachable min = %d, want 0", lo)
	}
	if got := rev.ActivationTimeout(); got != 630*time.Second {
		t.Errorf("ActivationTimeout = %v, want 630s", got)
	}
}

// seedConfigs are the fuzz seed corpus for both parsers; go test runs them.
var seedConfigs = []struct{ k1, v1, k2, v2 string }{
	{KeyStableWindow, "60s", KeyPanicWindowPercentage, "10"},
	{KeyContainerConcurrencyTargetPercentage, "0.7", KeyContainerConcurrencyTargetDefault, "100"},
	{KeyMaxScale, "3", KeyMinScale, "5"},
	{KeyMaxScaleLimit, "10", KeyMaxScale, "0"},
	{KeyTargetBurstCapacity, "-1", KeyScaleDownDelay, "1h30m"},
	{KeyInitialScale, "0", KeyAllowZeroInitialScale, "true"},
	{KeyEnableScaleToZero, "TRUE", KeyScaleToZeroGracePeriod, "-0s"},
	{KeyMaxScaleUpRate, "NaN", KeyMaxScaleDownRate, "1e309"},
	{AnnotationWindow, "6s", AnnotationPanicWindowPercentage, "1"},
	{Prefix + "minScale", "2", AnnotationMaxScale, "1"},
	{AnnotationActivationScale, "2147483648", AnnotationTarget, "0x10"},
	{AnnotationMetricAggregationAlgorithm, "weightedExponential", AnnotationClass, ClassHPA},
	{Prefix + "bogus", "1", AnnotationProgressDeadline, "9223372036s"},
	{KeyStableWindow, "+Inf", KeyMaxScale, "-1"},
	{AnnotationTarget, "1e300", AnnotationMinScale, "0-999999999"},
	{AnnotationClass, "x.knative.dev\n\x1b[2J", AnnotationMetric, "rps\x00"},
	{Prefix + strings.Repeat("k", 5000), "1", AnnotationWindow, strings.Repeat("9", 5000)},
	{Prefix + "bad key\n", strings.Repeat("\xff", 5000), AnnotationInitialScale, "0"},
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range seedConfigs {
		f.Add(s.k1, s.v1, s.k2, s.v2)
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		c, err := ParseConfig(map[string]string{k1: v1, k2: v2})
		if err != nil {
			// The error names a config key: one of those given, or one whose
			// default they made invalid (max-scale under a max-scale-limit).
			checkErr(t, err)
			var ke *KeyError
			if !errors.As(err, &ke) || (ke.Key != k1 && ke.Key != k2 && ke.Key != KeyMaxScale) {
				t.Fatalf("error %v does not name one of the keys", err)
			}
			return
		}
		// An accepted config always resolves to a valid decider spec.
		rev := Revision{Config: c, Deployment: DefaultDeployment(), Reachable: true}
		if err := func() error { s := rev.DeciderSpec(); return s.Validate() }(); err != nil {
			t.Fatalf("accepted config %v gives an invalid spec: %v", map[string]string{k1: v1, k2: v2}, err)
		}
	})
}

func FuzzParseAnnotations(f *testing.F) {
	for _, s := range seedConfigs {
		f.Add(s.k1, s.v1, s.k2, s.v2, int64(0))
	}
	f.Add(AnnotationTarget, "1e-3", AnnotationTargetUtilizationPercentage, "1", int64(10))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, cc int64) {
		ann := map[string]string{k1: v1, k2: v2}
		rev, err := NewRevision(Default(), DefaultDeployment(), ann, cc, true)
		if err != nil {
			checkErr(t, err)
			var ke *KeyError
			if errors.As(err, &ke) && ke.Key != k1 && ke.Key != k2 {
				t.Fatalf("error %v names neither key", err)
			}
			return
		}
		s := rev.DeciderSpec()
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted annotations %v (cc %d) give an invalid spec: %v", ann, cc, err)
		}
	})
}
