package kedascaler

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/tidalscale/tidal/collector/lag"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Metadata keys of the follow mode.
const (
	KeyPodAutoscaler = "podAutoscaler"
	KeyFunction      = "function"
	KeyNamespace     = "namespace"
)

// KeyBootstrapServers selects the inline Kafka mode.
const KeyBootstrapServers = "bootstrapServers"

// Bounds on what a trigger's metadata may hold: KEDA sends it on every call,
// and nothing a ScaledObject's author writes may grow an error or a log line
// without limit.
const (
	// MaxKeys bounds the keys of one trigger's metadata.
	MaxKeys = 64
	// MaxValueBytes bounds one value.
	MaxValueBytes = 4096
	// MaxBrokers bounds the addresses of bootstrapServers.
	MaxBrokers = 64
	// maxGroupBytes bounds consumerGroup (Kafka sets no limit of its own).
	maxGroupBytes = 255
	// MaxMetricName bounds the metric names GetMetricSpec returns; KEDA
	// prefixes them with "s<trigger index>-".
	MaxMetricName = 128
)

// ignoredKeys are the metadata keys KEDA itself reads to reach the scaler
// (and forwards with the rest); they say nothing about what to scale on.
var ignoredKeys = []string{"scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey"}

// followKeys are the keys of the follow mode.
var followKeys = []string{KeyPodAutoscaler, KeyFunction, KeyNamespace}

// kafkaKeys are KEDA's kafka trigger keys that inline Kafka reads. Apart
// from bootstrapServers and consumerGroup they are lagconfig parameters of
// the same name.
var kafkaKeys = []string{
	KeyBootstrapServers, "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
	"offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag", "scaleToZeroOnInvalidOffset",
	"limitToPartitionsWithLag", "partitionLimitation", "ensureEvenDistributionOfPartitions",
}

// maxPEMBytes bounds a PEM value (ca, cert, key): a CA bundle or a chain
// is longer than any other value.
const maxPEMBytes = 64 << 10

// pemKeys are the auth keys whose values are PEM.
var pemKeys = []string{"ca", "cert", "key"}

// fromEnv is the suffix KEDA keeps on a key whose value it read from the
// scale target's environment (lagThresholdFromEnv).
const fromEnv = "FromEnv"

// Kind is the kind of tidal object a follow trigger names.
type Kind int

const (
	// KindPodAutoscaler is a PodAutoscaler (autoscaling.tidal.dev).
	KindPodAutoscaler Kind = iota + 1
	// KindFunction is a Function (functions.tidal.dev).
	KindFunction
)

func (k Kind) String() string {
	switch k {
	case KindPodAutoscaler:
		return "PodAutoscaler"
	case KindFunction:
		return "Function"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Follow is a trigger that follows a tidal PodAutoscaler or Function.
type Follow struct {
	Kind      Kind
	Namespace string
	Name      string
}

// String names the object, as errors show it.
func (f Follow) String() string { return f.Kind.String() + " " + f.Namespace + "/" + f.Name }

// MetricName is the follow trigger's metric: a valid HPA metric name (a
// path segment of lower-case letters, digits and '-') of at most
// MaxMetricName bytes, the same on every collector replica.
func (f Follow) MetricName() string {
	kind := "podautoscaler"
	if f.Kind == KindFunction {
		kind = "function"
	}
	return metricName("tidal-" + kind + "-" + f.Namespace + "-" + strings.ReplaceAll(f.Name, ".", "-"))
}

// metricName bounds name to MaxMetricName bytes: a long name keeps a
// readable prefix and a hash of the whole, so two names that share the
// prefix still differ.
func metricName(name string) string {
	if len(name) <= MaxMetricName {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(name[:MaxMetricName-9], "-"), h.Sum32())
}

// Kafka is an inline Kafka trigger: KEDA's kafka trigger keys read into
// tidal's lag configuration.
type Kafka struct {
	Brokers []string
	Topic   string // empty: every topic the group has committed offsets for (keda mode), or the only one (riff modes)
	Group   string
	// Auth is how the brokers are reached: TLS, SASL and the protocol
	// version, from KEDA's kafka keys (the secrets through ...FromEnv).
	// It is not part of Hash: a changed credential reaches the same target.
	Auth   lag.Auth
	Config lagconfig.Config
	// Mode and Params are the lag mode and parameters as the trigger gave
	// them (KEDA's keys by their names, lag.tidal.dev/NAME as NAME): what
	// the decider's spec carries.
	Mode   lagconfig.Mode
	Params map[string]string
	// Hash identifies the measurement: brokers, group, topic, mode and
	// every parameter. A trigger whose metadata changes is a new target.
	Hash string
}

// Inline targets are named as KEDA's ScaledObjects, with the hash of their
// trigger appended: a key no Deployment or PodAutoscaler target shares.
const (
	InlineAPIVersion = "keda.sh/v1alpha1"
	InlineKind       = "ScaledObject"
	hashBytes        = 5 // 10 hex digits
)

// Target is the trigger's tidal target for the ScaledObject namespace/name
// (both valid): kind ScaledObject, named NAME-HASH.
func (k *Kafka) Target(namespace, name string) *commonv1.TargetRef {
	const keep = 253 - 1 - 2*hashBytes
	if len(name) > keep {
		// A subdomain's labels end with a letter or digit.
		name = strings.TrimRight(name[:keep], ".-")
	}
	return &commonv1.TargetRef{Namespace: namespace, Name: name + "-" + k.Hash, ApiVersion: InlineAPIVersion, Kind: InlineKind}
}

// MetricName is the trigger's metric, named for its topic (or its group
// when it names no topic), a valid HPA metric name as Follow.MetricName.
func (k *Kafka) MetricName() string {
	what := k.Topic
	if what == "" {
		what = "group-" + k.Group
	}
	seg := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, what)
	return metricName(strings.TrimRight("tidal-kafka-"+seg, "-"))
}

// KEDAMode reports whether the trigger answers with KEDA's metric (keda
// mode) rather than tidal's desired replicas (the riff modes).
func (k *Kafka) KEDAMode() bool { return k.Mode == lagconfig.ModeKEDA }

// Spec is the decider's spec of the trigger's target: its lag parameters
// under lag.tidal.dev/, and advisory, as KEDA scales the workload.
func (k *Kafka) Spec(ref *commonv1.TargetRef) *deciderv1.TargetSpec {
	ann := map[string]string{lagconfig.AnnotationPrefix + "mode": string(k.Mode)}
	for name, v := range k.Params {
		ann[lagconfig.AnnotationPrefix+name] = v
	}
	return &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_LAG, Annotations: ann, Advisory: true}
}

// Trigger is one parsed trigger: exactly one of Follow and Kafka is set.
type Trigger struct {
	Follow *Follow
	Kafka  *Kafka
}

// Parse reads a trigger's metadata. Namespace is the ScaledObject's, the
// default namespace of a follow trigger. Errors are *commonv1.FieldError
// naming the key (as scalerMetadata.KEY) and quoting a bounded prefix of
// the value.
func Parse(namespace string, md map[string]string) (Trigger, error) {
	if len(md) > MaxKeys {
		return Trigger{}, commonv1.Invalid("scalerMetadata", fmt.Sprintf("%d keys", len(md)), fmt.Sprintf("at most %d keys", MaxKeys))
	}
	vals, err := normalize(md)
	if err != nil {
		return Trigger{}, err
	}
	follow, kafka := firstOf(vals, followKeys), firstOf(vals, kafkaKeys)
	if kafka == "" {
		for k := range vals {
			if strings.HasPrefix(k, lagconfig.AnnotationPrefix) {
				kafka = k
				break
			}
		}
	}
	switch {
	case follow != "" && kafka != "":
		return Trigger{}, commonv1.Invalid(field(kafka), vals[kafka],
			fmt.Sprintf("no inline Kafka key beside %s: a trigger either follows a tidal target (%s, %s) or measures Kafka (%s)", follow, KeyPodAutoscaler, KeyFunction, KeyBootstrapServers))
	case follow != "":
		f, err := parseFollow(namespace, vals)
		if err != nil {
			return Trigger{}, err
		}
		return Trigger{Follow: &f}, nil
	case kafka != "":
		k, err := parseKafka(vals)
		if err != nil {
			return Trigger{}, err
		}
		return Trigger{Kafka: &k}, nil
	}
	return Trigger{}, commonv1.Invalid("scalerMetadata", "", fmt.Sprintf("%s or %s (follow a tidal target), or %s (inline Kafka)", KeyPodAutoscaler, KeyFunction, KeyBootstrapServers))
}

// normalize checks every key and value, folds KEY + FromEnv into KEY, and
// drops KEDA's own keys. An unknown key is refused: a misspelt key would
// otherwise be a setting silently not applied.
func normalize(md map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(md))
	for _, k := range slices.Sorted(maps.Keys(md)) { // the same first error every time
		v := md[k]
		if slices.Contains(ignoredKeys, k) {
			continue
		}
		name := k
		if base, ok := strings.CutSuffix(k, fromEnv); ok && base != "" && known(base) {
			if _, both := md[base]; both {
				return nil, commonv1.Invalid(field(k), v, "only one of "+base+" and "+k)
			}
			name = base
		}
		secret := slices.Contains(lag.SecretAuthKeys, name)
		if secret && name == k {
			// KEDA forwards a KEY+FromEnv key with the value it read from
			// the scale target's environment (a Secret's, through the pod
			// spec); a secret written in the ScaledObject is readable by
			// all who can read that.
			return nil, commonv1.Invalid(field(k), "(not shown)", "the secret from the workload's environment: "+k+fromEnv+
				" naming an environment variable of the scale target (set from a Secret), never the secret itself")
		}
		if !known(name) {
			return nil, commonv1.Invalid("scalerMetadata", commonv1.Printable(k),
				fmt.Sprintf("a key tidal reads: %s, %s, %s; or KEDA's kafka trigger keys (%s, ...) with %s* options",
					KeyPodAutoscaler, KeyFunction, KeyNamespace, KeyBootstrapServers, lagconfig.AnnotationPrefix))
		}
		shown := v
		if slices.Contains(lag.AuthKeys, name) {
			shown = "(not shown)" // the auth keys' values are never quoted
		}
		limit := MaxValueBytes
		if slices.Contains(pemKeys, name) {
			limit = maxPEMBytes
		}
		if len(v) > limit {
			return nil, commonv1.Invalid(field(k), shown, fmt.Sprintf("at most %d bytes", limit))
		}
		if slices.Contains(pemKeys, name) {
			// PEM is lines of text.
			if !commonv1.IsText(strings.NewReplacer("\n", "", "\r", "").Replace(v)) {
				return nil, commonv1.Invalid(field(k), shown, "PEM text")
			}
		} else if !commonv1.IsText(v) {
			if shown == v {
				shown = commonv1.Printable(v)
			}
			return nil, commonv1.Invalid(field(k), shown, "text without control characters")
		}
		if secret || slices.Contains(pemKeys, name) {
			out[name] = v // as the Secret holds it
		} else {
			out[name] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

func known(k string) bool {
	if slices.Contains(followKeys, k) || slices.Contains(kafkaKeys, k) || slices.Contains(lag.AuthKeys, k) {
		return true
	}
	name, ok := strings.CutPrefix(k, lagconfig.AnnotationPrefix)
	return ok && name != ""
}

// firstOf returns the first of keys present in vals, or "".
func firstOf(vals map[string]string, keys []string) string {
	for _, k := range keys {
		if _, ok := vals[k]; ok {
			return k
		}
	}
	return ""
}

func field(key string) string { return "scalerMetadata." + key }

func parseFollow(namespace string, vals map[string]string) (Follow, error) {
	pa, hasPA := vals[KeyPodAutoscaler]
	fn, hasFn := vals[KeyFunction]
	f := Follow{Namespace: namespace}
	key := KeyPodAutoscaler
	switch {
	case hasPA && hasFn:
		return f, commonv1.Invalid(field(KeyFunction), fn, "no "+KeyFunction+" beside "+KeyPodAutoscaler+": a trigger follows one target")
	case hasPA:
		f.Kind, f.Name = KindPodAutoscaler, pa
	case hasFn:
		f.Kind, f.Name, key = KindFunction, fn, KeyFunction
	default:
		return f, commonv1.Invalid(field(KeyPodAutoscaler), "", "the PodAutoscaler ("+KeyPodAutoscaler+") or Function ("+KeyFunction+") to follow, beside "+KeyNamespace)
	}
	if err := commonv1.ValidateSubdomain(field(key), f.Name); err != nil {
		return f, err
	}
	if ns, ok := vals[KeyNamespace]; ok {
		f.Namespace = ns
		if err := commonv1.ValidateLabel(field(KeyNamespace), ns); err != nil {
			return f, err
		}
	} else if err := commonv1.ValidateLabel("namespace", namespace); err != nil {
		// KEDA always sends the ScaledObject's namespace; a caller that
		// does not must name one.
		return f, commonv1.Invalid(field(KeyNamespace), "", "a namespace: the ScaledObject's is missing or invalid")
	}
	return f, nil
}

func parseKafka(vals map[string]string) (Kafka, error) {
	var k Kafka
	servers, ok := vals[KeyBootstrapServers]
	if !ok || servers == "" {
		return k, commonv1.Invalid(field(KeyBootstrapServers), servers, "the Kafka brokers as host:port[,host:port...] (or "+KeyBootstrapServers+fromEnv+")")
	}
	for b := range strings.SplitSeq(servers, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if !isHostPort(b) {
			return k, commonv1.Invalid(field(KeyBootstrapServers), b, "host:port with a port from 1 to 65535")
		}
		if len(k.Brokers) == MaxBrokers {
			return k, commonv1.Invalid(field(KeyBootstrapServers), servers, fmt.Sprintf("at most %d brokers", MaxBrokers))
		}
		k.Brokers = append(k.Brokers, b)
	}
	if len(k.Brokers) == 0 {
		return k, commonv1.Invalid(field(KeyBootstrapServers), servers, "at least one host:port")
	}
	k.Group = vals["consumerGroup"]
	if k.Group == "" || len(k.Group) > maxGroupBytes {
		return k, commonv1.Invalid(field("consumerGroup"), k.Group, fmt.Sprintf("the consumer group to measure, 1 to %d bytes", maxGroupBytes))
	}
	k.Topic = vals["topic"]
	if k.Topic != "" && !commonv1.IsTopic(k.Topic) {
		return k, commonv1.Invalid(field("topic"), k.Topic, fmt.Sprintf("a Kafka topic name: 1 to %d of a-z, A-Z, 0-9, '.', '_' and '-'", commonv1.MaxTopicBytes))
	}
	auth, err := parseKafkaAuth(vals, k.Brokers)
	if err != nil {
		return k, err
	}
	k.Auth = auth

	// The rest are lagconfig parameters, under KEDA's names or as
	// lag.tidal.dev/NAME; KEDA's semantics unless lag.tidal.dev/mode says
	// otherwise.
	mode := string(lagconfig.ModeKEDA)
	params := map[string]string{}
	for key, v := range vals {
		name, tidal := strings.CutPrefix(key, lagconfig.AnnotationPrefix)
		switch {
		case tidal && name == "mode":
			mode = v
			continue
		case !tidal && (key == KeyBootstrapServers || key == "consumerGroup" || slices.Contains(lag.AuthKeys, key)):
			continue
		case tidal && slices.Contains(kafkaKeys, name):
			if _, both := vals[name]; both {
				return k, commonv1.Invalid(field(key), v, "only one of "+name+" and "+key)
			}
		}
		params[name] = v
	}
	cfg, err := lagconfig.ParseConfig(mode, params)
	if err != nil {
		// lagconfig's error names the parameter and quotes a bounded
		// prefix of its value.
		return k, fmt.Errorf("scalerMetadata: %w", err)
	}
	if k.Topic == "" && cfg.Mode == lagconfig.ModeKEDA {
		// KEDA refuses these without a topic (and ignores
		// partitionLimitation): each names the partitions of one topic.
		for _, o := range []struct {
			key string
			set bool
		}{{"limitToPartitionsWithLag", cfg.LimitToPartitionsWithLag}, {"ensureEvenDistributionOfPartitions", cfg.EnsureEvenDistributionOfPartitions},
			{"partitionLimitation", len(cfg.PartitionLimitation) > 0}} {
			if o.set {
				return k, commonv1.Invalid(field(o.key), vals[o.key], "a topic beside it: without one the group's every topic is summed, and "+o.key+" names the partitions of one")
			}
		}
	}
	k.Config, k.Mode, k.Params = cfg, cfg.Mode, params
	k.Hash = measurementHash(&k)
	return k, nil
}

// measurementHash hashes what defines a trigger's measurement, the same
// on every collector replica.
func measurementHash(k *Kafka) string {
	h := sha256.New()
	// Quoted fields cannot run into each other.
	fmt.Fprintf(h, "%q|%q|%q|%q", k.Brokers, k.Group, k.Topic, k.Mode)
	for _, name := range slices.Sorted(maps.Keys(k.Params)) {
		fmt.Fprintf(h, "|%q=%q", name, k.Params[name])
	}
	return hex.EncodeToString(h.Sum(nil)[:hashBytes])
}

func isHostPort(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 1 && p <= 65535
}
