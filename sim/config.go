package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/keyval"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// File is a configuration file: the configurations to compare, in the order
// the report shows them. It is YAML or JSON; an unknown key anywhere is
// refused, naming it.
//
//	configurations:
//	- name: knative-defaults
//	  strategy: kpa                   # or lag
//	  autoscaler:                     # config-autoscaler keys, as in the ConfigMap
//	    scale-to-zero-grace-period: 30s
//	  annotations:                    # autoscaling.knative.dev/* or lag.tidal.dev/*
//	    autoscaling.knative.dev/target: "10"
//	  containerConcurrency: 0         # the pods' hard limit, as in the Revision
//	  pods: {readyDelay: 1s, coldStart: 2s, serviceTime: 100ms}
type File struct {
	Configurations []Configuration `json:"configurations"`
}

// Configuration is one way of scaling the trace's target.
type Configuration struct {
	// Name labels the configuration in the report; unique in a file.
	Name string `json:"name"`
	// Strategy is "kpa" (default) or "lag".
	Strategy string `json:"strategy,omitempty"`
	// Autoscaler holds config-autoscaler keys (strategy/kpaconfig): the
	// cluster-wide defaults the decider and the actuator both read.
	Autoscaler map[string]string `json:"autoscaler,omitempty"`
	// Annotations are the target's own keys: autoscaling.knative.dev/* for
	// KPA (strategy/kpaconfig), lag.tidal.dev/* for lag (strategy/lagconfig).
	Annotations map[string]string `json:"annotations,omitempty"`
	// ContainerConcurrency is the pods' hard concurrency limit (the
	// Revision's containerConcurrency): the KPA's target defaults from it,
	// and a pod serves at most this many requests at once. 0 means none.
	ContainerConcurrency int32 `json:"containerConcurrency,omitempty"`
	// Partitions is a lag target's partition count; 0 takes the trace's
	// (a history export's), else 1.
	Partitions int32 `json:"partitions,omitempty"`
	// InitialReplicas is the Deployment's replicas at the start; default 1.
	InitialReplicas *int32 `json:"initialReplicas,omitempty"`
	// Pods describes how the pods start and serve.
	Pods Pods `json:"pods,omitempty"`

	// group and label place a swept configuration on its sweep's line
	// (Sweep); empty for the configurations of a file.
	group, label string
}

// Pods is the pod model's parameters.
type Pods struct {
	// ReadyDelay is from the Deployment's scale-up to the pod being Ready
	// (scheduling, image pull, container start, readiness probe).
	ReadyDelay Duration `json:"readyDelay,omitempty"`
	// ColdStart is from Ready to serving its first request (a runtime
	// warming up); requests routed meanwhile wait.
	ColdStart Duration `json:"coldStart,omitempty"`
	// ServiceTime is one request's service time (KPA); default 100ms.
	ServiceTime Duration `json:"serviceTime,omitempty"`
	// ExponentialService draws service times from an exponential
	// distribution of mean ServiceTime (seeded); else each takes exactly it.
	ExponentialService bool `json:"exponentialService,omitempty"`
	// RecordsPerSecond is how many records one consumer pod processes a
	// second (lag); default 100.
	RecordsPerSecond float64 `json:"recordsPerSecond,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("1m30s").
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"500ms\"", keyval.Quote(string(b)))
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("duration %s: want a duration >= 0 such as \"500ms\"", keyval.Quote(s))
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// MaxConfigurations bounds the configurations of one file.
const MaxConfigurations = 16

// Strategies.
const (
	StrategyKPA = "kpa"
	StrategyLag = "lag"
)

// knownAutoscalerKeys are the config-autoscaler keys tidal reads
// (strategy/kpaconfig). Knative ignores unknown keys in the ConfigMap; a
// what-if file refuses them, as a typo there would silently compare nothing.
var knownAutoscalerKeys = map[string]bool{
	kpaconfig.KeyContainerConcurrencyTargetPercentage: true,
	kpaconfig.KeyContainerConcurrencyTargetDefault:    true,
	kpaconfig.KeyRPSTargetDefault:                     true,
	kpaconfig.KeyTargetBurstCapacity:                  true,
	kpaconfig.KeyStableWindow:                         true,
	kpaconfig.KeyPanicWindowPercentage:                true,
	kpaconfig.KeyPanicThresholdPercentage:             true,
	kpaconfig.KeyMaxScaleUpRate:                       true,
	kpaconfig.KeyMaxScaleDownRate:                     true,
	kpaconfig.KeyEnableScaleToZero:                    true,
	kpaconfig.KeyScaleToZeroGracePeriod:               true,
	kpaconfig.KeyScaleToZeroPodRetentionPeriod:        true,
	kpaconfig.KeyScaleDownDelay:                       true,
	kpaconfig.KeyActivatorCapacity:                    true,
	kpaconfig.KeyInitialScale:                         true,
	kpaconfig.KeyAllowZeroInitialScale:                true,
	kpaconfig.KeyMinScale:                             true,
	kpaconfig.KeyMaxScale:                             true,
	kpaconfig.KeyMaxScaleLimit:                        true,
	kpaconfig.KeyPodAutoscalerClass:                   true,
	kpaconfig.KeyKeepAlive:                            true,
}

// ParseFile reads a configuration file (YAML or JSON) and checks every
// configuration with the parsers the services use.
func ParseFile(data []byte) ([]Configuration, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// encoding/json matches keys without regard to case; a key must be
	// spelt as documented.
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := exactKeys("", raw, reflect.TypeFor[File]()); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(f.Configurations) == 0 {
		return nil, fmt.Errorf("config: field configurations: want at least one")
	}
	if len(f.Configurations) > MaxConfigurations {
		return nil, fmt.Errorf("config: field configurations: %d, want at most %d", len(f.Configurations), MaxConfigurations)
	}
	names := map[string]bool{}
	for i := range f.Configurations {
		c := &f.Configurations[i]
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("config: configurations[%d]: %w", i, err)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("config: configurations[%d]: field name %s: used twice", i, keyval.Quote(c.Name))
		}
		names[c.Name] = true
	}
	return f.Configurations, nil
}

// Check fills defaults and validates the configuration with the services'
// own parsers; the error names the field or key.
func (c *Configuration) Check() error {
	if c.Name == "" || len(c.Name) > 64 || strings.ContainsFunc(c.Name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("field name %s: want 1 to 64 printable characters", keyval.Quote(c.Name))
	}
	if c.Strategy == "" {
		c.Strategy = StrategyKPA
	}
	if c.Pods.ServiceTime == 0 {
		c.Pods.ServiceTime = Duration(100 * time.Millisecond)
	}
	if c.Pods.RecordsPerSecond == 0 {
		c.Pods.RecordsPerSecond = 100
	}
	if r := c.Pods.RecordsPerSecond; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) || r > 1e9 {
		return fmt.Errorf("field pods.recordsPerSecond %v: want a rate in (0, 1e9]", r)
	}
	if c.ContainerConcurrency < 0 {
		return fmt.Errorf("field containerConcurrency %d: want >= 0 (0 means no limit)", c.ContainerConcurrency)
	}
	if c.Partitions < 0 || c.Partitions > lagconfig.MaxPartitionID {
		return fmt.Errorf("field partitions %d: want 0 to %d", c.Partitions, lagconfig.MaxPartitionID)
	}
	if r := c.InitialReplicas; r != nil && (*r < 0 || *r > 10000) {
		return fmt.Errorf("field initialReplicas %d: want 0 to 10000", *r)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Autoscaler)) {
		if !knownAutoscalerKeys[k] {
			return fmt.Errorf("field autoscaler: unknown config-autoscaler key %s", keyval.Name(k))
		}
	}
	kcfg, err := kpaconfig.ParseConfig(c.Autoscaler)
	if err != nil {
		return fmt.Errorf("field autoscaler: %w", err)
	}
	switch c.Strategy {
	case StrategyKPA:
		for _, k := range slices.Sorted(maps.Keys(c.Annotations)) {
			if !strings.HasPrefix(k, kpaconfig.Prefix) && k != kpaconfig.AnnotationKeepAlive {
				return fmt.Errorf("field annotations: key %s: a kpa configuration takes %s* keys and %s", keyval.Name(k), kpaconfig.Prefix, kpaconfig.AnnotationKeepAlive)
			}
		}
		if _, err := kpaconfig.NewRevision(kcfg, kpaconfig.DefaultDeployment(), c.Annotations, int64(c.ContainerConcurrency), true); err != nil {
			return fmt.Errorf("field annotations: %w", err)
		}
	case StrategyLag:
		for _, k := range slices.Sorted(maps.Keys(c.Annotations)) {
			if !strings.HasPrefix(k, lagconfig.AnnotationPrefix) {
				return fmt.Errorf("field annotations: key %s: a lag configuration takes %s* keys", keyval.Name(k), lagconfig.AnnotationPrefix)
			}
		}
		if _, err := lagconfig.FromAnnotations(c.Annotations); err != nil {
			return fmt.Errorf("field annotations: %w", err)
		}
	default:
		return fmt.Errorf("field strategy %s: want kpa or lag", keyval.Quote(c.Strategy))
	}
	return nil
}

// exactKeys checks that every key of v (decoded JSON) is a json tag of t,
// spelt exactly, recursing into structs and slices of structs; maps of
// strings are the user's keys and checked elsewhere.
func exactKeys(path string, v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			items, ok := v.([]any)
			if !ok {
				return nil // a type error, which Unmarshal reported
			}
			for i, it := range items {
				if err := exactKeys(fmt.Sprintf("%s[%d]", path, i), it, t.Elem()); err != nil {
					return err
				}
			}
			return nil
		}
		t = t.Elem()
	}
	obj, ok := v.(map[string]any)
	if t.Kind() != reflect.Struct || !ok {
		return nil
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		fields[name] = t.Field(i).Type
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		ft, ok := fields[k]
		if !ok {
			return fmt.Errorf("%s: unknown field %s", strings.TrimPrefix(path+"."+keyval.Name(k), "."), keyval.Quote(k))
		}
		if err := exactKeys(strings.TrimPrefix(path+"."+k, "."), obj[k], ft); err != nil {
			return err
		}
	}
	return nil
}
