// Package lagconfig is the configuration of tidal's lag strategy: its modes
// (riff-offset, riff-queue, keda), their parameters under the originals'
// names with the originals' defaults, and how they are read from
// lag.tidal.dev/* annotations. The collector reads it to know how often to
// measure a target; strategy/lag runs it, in the decider and, for KEDA's
// inline Kafka triggers, in the collector.
package lagconfig

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
)

// Mode selects the lag algorithm of a target.
type Mode string

const (
	// ModeRiffOffset is riff v0.0.5 (function-controller v0.0.3/v0.0.4): the
	// largest per-partition lag through a linear policy, a 5 %-per-tick
	// smoother and an idle delayer that also holds a stalled consumer.
	ModeRiffOffset Mode = "riff-offset"
	// ModeRiffQueue is riff v0.0.6+ (the autoscaler package): writes-or-queue
	// proposal, cap, smoother, hold while the queue is non-empty, delayer.
	ModeRiffQueue Mode = "riff-queue"
	// ModeKEDA is KEDA's Kafka scaler (summed lag over lagThreshold, with its
	// activation and cap rules) followed by the HPA's AverageValue arithmetic.
	ModeKEDA Mode = "keda"
)

// OffsetResetPolicy is KEDA's offsetResetPolicy: what a partition without a
// committed offset is charged.
type OffsetResetPolicy string

const (
	// ResetLatest charges a partition without a commit a lag of 1, so one
	// consumer starts and commits.
	ResetLatest OffsetResetPolicy = "latest"
	// ResetEarliest charges it its whole log (end offset; the log is assumed to
	// start at 0, as KEDA does).
	ResetEarliest OffsetResetPolicy = "earliest"
)

// MinTickInterval is the shortest decision interval of a lag target, half
// of riff's 100 ms (the finest any original used, 97 ms in riff v0.0.7).
const MinTickInterval = 50 * time.Millisecond

// NoMaxReplicas as Config.MaxReplicas means "unset": riff then caps at the
// topic's partition count.
const NoMaxReplicas int32 = -1

// Defaults, each from the original it reproduces.
const (
	// riff: controller.DefaultScalerInterval (v0.0.3–v0.0.6; v0.0.7+ uses 97 ms).
	defaultRiffTickInterval = 100 * time.Millisecond
	// riff: Function.spec.idleTimeoutMs CRD default, and the v0.0.6 controller fallback.
	defaultRiffIdleTimeout = 10 * time.Second
	// riff v0.0.5: lagRequiredForOne and lagRequiredForMax in desiredReplicasForTopic.
	defaultLagForOne = 1
	defaultLagForMax = 10

	// KEDA: ScaledObject pollingInterval and cooldownPeriod defaults.
	defaultKEDAPollingInterval = 30 * time.Second
	defaultKEDACooldown        = 300 * time.Second
	// KEDA: maxReplicaCount default (minReplicaCount defaults to 0).
	defaultKEDAMaxReplicas = 100
	// KEDA Kafka scaler: lagThreshold and activationLagThreshold defaults.
	defaultLagThreshold           = 10
	defaultActivationLagThreshold = 0
	// HPA: --horizontal-pod-autoscaler-tolerance and the default
	// behavior.scaleDown.stabilizationWindowSeconds.
	defaultHPATolerance     = 0.1
	defaultHPAStabilization = 300 * time.Second

	// MaxPartitionID bounds partition ids so that per-partition state can be
	// indexed by id; Kafka's own practical limit is far lower.
	MaxPartitionID = 1 << 20
)

// Config is one target's lag-scaling configuration. Build it with
// DefaultConfig or ParseConfig, then Validate.
type Config struct {
	// Mode selects the algorithm.
	Mode Mode
	// Faithful reproduces the original's numbers including its known faults;
	// the conformance replay sets it. false (the default) fixes them.
	Faithful bool
	// Topic is the input topic. In faithful riff-queue a change rebuilds the
	// scaler chain, as riff's StopMonitoring/StartMonitoring did.
	Topic string
	// TickInterval is how often the shell ticks the target (riff 100 ms; KEDA
	// pollingInterval 30 s). Strategies use absolute times; the interval only
	// sizes the HPA stabilization window.
	TickInterval time.Duration
	// IdleTimeout is riff's idleTimeoutMs (10 s) or KEDA's cooldownPeriod
	// (300 s): how long an idle target keeps its last replica before 0.
	IdleTimeout time.Duration
	// MaxReplicas is riff's maxReplicas (NoMaxReplicas: the partition count;
	// 0 keeps riff's "never start") or KEDA's maxReplicaCount (100).
	MaxReplicas int32
	// MinReplicas is KEDA's minReplicaCount (0). riff has none: it must be 0.
	MinReplicas int32
	// DeclaredPartitions is riff's Topic resource spec.partitions; 0 means no
	// Topic resource. Faithful riff caps at it (1 when 0); the fixed modes cap
	// at the partition count the collector reports.
	DeclaredPartitions int32

	// LagForOne and LagForMax are riff-offset's policy points: the largest
	// per-partition lag that asks for one replica and for MaxReplicas (1, 10).
	LagForOne int64
	LagForMax int64

	// LagThreshold is KEDA's lagThreshold (10): target lag per replica.
	LagThreshold int64
	// ActivationLagThreshold is KEDA's activationLagThreshold (0): active iff
	// the total lag is strictly above it.
	ActivationLagThreshold int64
	// OffsetResetPolicy is KEDA's offsetResetPolicy (latest).
	OffsetResetPolicy OffsetResetPolicy
	// AllowIdleConsumers lifts KEDA's cap at the partition count.
	AllowIdleConsumers bool
	// ScaleToZeroOnInvalidOffset makes a partition without a commit count 0.
	ScaleToZeroOnInvalidOffset bool
	// ExcludePersistentLag drops a partition's lag from the metric (not from
	// activation) when its committed offset did not move since the last poll.
	ExcludePersistentLag bool
	// LimitToPartitionsWithLag caps at the number of partitions with lag.
	LimitToPartitionsWithLag bool
	// EnsureEvenDistributionOfPartitions rounds the lag-implied replica
	// count up to the next factor of the partition count, so every
	// consumer gets as many partitions as every other.
	EnsureEvenDistributionOfPartitions bool
	// PartitionLimitation lists the partition ids to consider; nil means all.
	PartitionLimitation []int32
	// Tolerance is the HPA's tolerance (0.1): no change while the usage ratio
	// is within it.
	Tolerance float64
	// ScaleDownStabilization is the HPA's scale-down stabilization window
	// (300 s): the highest recommendation within it wins.
	ScaleDownStabilization time.Duration
}

// DefaultConfig returns the original's defaults for mode. An unknown mode
// gets riff-queue's defaults and fails Validate.
func DefaultConfig(mode Mode) Config {
	c := Config{
		Mode:         mode,
		TickInterval: defaultRiffTickInterval,
		IdleTimeout:  defaultRiffIdleTimeout,
		MaxReplicas:  NoMaxReplicas,
		LagForOne:    defaultLagForOne,
		LagForMax:    defaultLagForMax,

		LagThreshold:           defaultLagThreshold,
		ActivationLagThreshold: defaultActivationLagThreshold,
		OffsetResetPolicy:      ResetLatest,
		Tolerance:              defaultHPATolerance,
		ScaleDownStabilization: defaultHPAStabilization,
	}
	if mode == ModeKEDA {
		c.TickInterval = defaultKEDAPollingInterval
		c.IdleTimeout = defaultKEDACooldown
		c.MaxReplicas = defaultKEDAMaxReplicas
	}
	return c
}

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("invalid lag config")

func configErr(field string, value any, want string) error {
	return invalid(keyval.Refuse(field, fmt.Sprint(value), "%s", want))
}

func invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalidConfig, err) }

// Validate reports the first field that is out of range, naming the field,
// the value and the allowed range.
func (c *Config) Validate() error {
	switch c.Mode {
	case ModeRiffOffset, ModeRiffQueue, ModeKEDA:
	default:
		return configErr("mode", c.Mode, `"riff-offset", "riff-queue" or "keda"`)
	}
	if c.TickInterval < MinTickInterval {
		// Each tick reads the group's offsets from Kafka: a tenant's 1ns
		// would make the collector poll its brokers without pause.
		return configErr("tickInterval", c.TickInterval, fmt.Sprintf(">= %s", MinTickInterval))
	}
	if c.IdleTimeout < 0 {
		return configErr("idleTimeout", c.IdleTimeout, ">= 0")
	}
	if c.DeclaredPartitions < 0 {
		return configErr("partitions", c.DeclaredPartitions, ">= 0 (0: no Topic resource)")
	}
	if c.Mode != ModeKEDA {
		if c.MaxReplicas < NoMaxReplicas {
			return configErr("maxReplicas", c.MaxReplicas, ">= 0, or -1 for unset")
		}
		if c.MinReplicas != 0 {
			return configErr("minReplicas", c.MinReplicas, "0 (riff has no minimum)")
		}
		if c.LagForOne < 0 {
			return configErr("lagForOne", c.LagForOne, ">= 0")
		}
		if c.LagForMax <= c.LagForOne {
			return configErr("lagForMax", c.LagForMax, fmt.Sprintf("> lagForOne (%d)", c.LagForOne))
		}
		return nil
	}
	if c.MinReplicas < 0 {
		return configErr("minReplicaCount", c.MinReplicas, ">= 0")
	}
	if c.MaxReplicas < 1 || c.MaxReplicas < c.MinReplicas {
		return configErr("maxReplicaCount", c.MaxReplicas, fmt.Sprintf(">= max(1, minReplicaCount=%d)", c.MinReplicas))
	}
	if c.LagThreshold <= 0 {
		return configErr("lagThreshold", c.LagThreshold, "> 0")
	}
	if c.ActivationLagThreshold < 0 {
		return configErr("activationLagThreshold", c.ActivationLagThreshold, ">= 0")
	}
	switch c.OffsetResetPolicy {
	case ResetLatest, ResetEarliest:
	default:
		return configErr("offsetResetPolicy", c.OffsetResetPolicy, `"latest" or "earliest"`)
	}
	if c.AllowIdleConsumers && c.LimitToPartitionsWithLag {
		return configErr("limitToPartitionsWithLag", true, "false when allowIdleConsumers is true")
	}
	if c.EnsureEvenDistributionOfPartitions && c.LimitToPartitionsWithLag {
		return configErr("ensureEvenDistributionOfPartitions", true, "false when limitToPartitionsWithLag is true")
	}
	for _, p := range c.PartitionLimitation {
		if p < 0 || p >= MaxPartitionID {
			return configErr("partitionLimitation", p, fmt.Sprintf("partition ids in [0, %d)", MaxPartitionID))
		}
	}
	if math.IsNaN(c.Tolerance) || c.Tolerance < 0 || c.Tolerance >= 1 {
		return configErr("tolerance", c.Tolerance, "in [0, 1)")
	}
	if c.ScaleDownStabilization < 0 {
		return configErr("scaleDownStabilization", c.ScaleDownStabilization, ">= 0")
	}
	return nil
}

// params are the parameters ParseConfig reads, spelled as KEDA spells its
// trigger metadata.
var params = keyval.New(keyval.KEDA,
	keyval.Set("faithful", keyval.Bool(), func(c *Config, b bool) { c.Faithful = b }),
	keyval.Set("topic", keyval.Text(), func(c *Config, v string) { c.Topic = v }),
	keyval.Set("tickInterval", nonNegative, func(c *Config, d time.Duration) { c.TickInterval = d }),
	keyval.Set("pollingInterval", keyval.Count(time.Second), func(c *Config, d time.Duration) { c.TickInterval = d }),
	keyval.Set("idleTimeout", nonNegative, func(c *Config, d time.Duration) { c.IdleTimeout = d }),
	keyval.Set("idleTimeoutMs", keyval.Count(time.Millisecond), func(c *Config, d time.Duration) { c.IdleTimeout = d }),
	keyval.Set("cooldownPeriod", keyval.Count(time.Second), func(c *Config, d time.Duration) { c.IdleTimeout = d }),
	keyval.Set("maxReplicas", replicas(NoMaxReplicas), func(c *Config, n int32) { c.MaxReplicas = n }),
	keyval.Set("maxReplicaCount", replicas(NoMaxReplicas), func(c *Config, n int32) { c.MaxReplicas = n }),
	keyval.Set("minReplicaCount", replicas(0), func(c *Config, n int32) { c.MinReplicas = n }),
	keyval.Set("partitions", replicas(0), func(c *Config, n int32) { c.DeclaredPartitions = n }),
	keyval.Set("lagForOne", keyval.Int[int64](0, math.MaxInt64), func(c *Config, n int64) { c.LagForOne = n }),
	keyval.Set("lagForMax", keyval.Int[int64](1, math.MaxInt64), func(c *Config, n int64) { c.LagForMax = n }),
	keyval.Set("lagThreshold", keyval.Int[int64](1, math.MaxInt64), func(c *Config, n int64) { c.LagThreshold = n }),
	keyval.Set("activationLagThreshold", keyval.Int[int64](0, math.MaxInt64), func(c *Config, n int64) { c.ActivationLagThreshold = n }),
	keyval.Set("offsetResetPolicy", keyval.Text(), func(c *Config, v string) { c.OffsetResetPolicy = OffsetResetPolicy(v) }),
	keyval.Set("allowIdleConsumers", keyval.Bool(), func(c *Config, b bool) { c.AllowIdleConsumers = b }),
	keyval.Set("scaleToZeroOnInvalidOffset", keyval.Bool(), func(c *Config, b bool) { c.ScaleToZeroOnInvalidOffset = b }),
	keyval.Set("excludePersistentLag", keyval.Bool(), func(c *Config, b bool) { c.ExcludePersistentLag = b }),
	keyval.Set("limitToPartitionsWithLag", keyval.Bool(), func(c *Config, b bool) { c.LimitToPartitionsWithLag = b }),
	keyval.Set("ensureEvenDistributionOfPartitions", keyval.Bool(), func(c *Config, b bool) { c.EnsureEvenDistributionOfPartitions = b }),
	keyval.Set("partitionLimitation", partitionList, func(c *Config, ids []int32) { c.PartitionLimitation = ids }),
	keyval.Set("tolerance", keyval.Float(), func(c *Config, f float64) { c.Tolerance = f }),
	keyval.Set("scaleDownStabilization", nonNegative, func(c *Config, d time.Duration) { c.ScaleDownStabilization = d }),
)

var nonNegative = keyval.Duration(false, keyval.AtLeast(time.Duration(0)))

func replicas(lo int32) keyval.Parser[int32] { return keyval.Int[int32](lo, math.MaxInt32) }

// ParseConfig builds a validated Config from string parameters (annotations
// or trigger metadata), starting from mode's defaults. Keys use the
// originals' names: idleTimeoutMs, maxReplicas and partitions (riff);
// pollingInterval, cooldownPeriod (seconds), minReplicaCount, maxReplicaCount,
// lagThreshold, activationLagThreshold, offsetResetPolicy,
// allowIdleConsumers, scaleToZeroOnInvalidOffset, excludePersistentLag,
// limitToPartitionsWithLag, ensureEvenDistributionOfPartitions,
// partitionLimitation (KEDA); and tidal's
// faithful, topic, tickInterval, idleTimeout, lagForOne, lagForMax,
// tolerance, scaleDownStabilization (Go durations). Values are spelled as
// KEDA spells them (keyval.KEDA). An unknown key is an error.
func ParseConfig(mode string, p map[string]string) (Config, error) {
	c := DefaultConfig(Mode(mode))
	if err := c.Validate(); err != nil { // only an unknown mode can fail here
		return c, err
	}
	unknown, err := params.Parse(&c, p)
	// The first key at fault in key order, unknown or refused.
	var ke *keyval.Error
	if len(unknown) > 0 && (!errors.As(err, &ke) || unknown[0] < ke.Key) {
		return c, invalid(keyval.Unknown(unknown[0], p[unknown[0]], "parameter"))
	}
	if err != nil {
		return c, invalid(err)
	}
	return c, c.Validate()
}

// ParsePartitionLimitation parses KEDA's partitionLimitation: a comma list of
// partition ids and inclusive ranges, e.g. "0,2,10-20". Empty means all.
func ParsePartitionLimitation(v string) ([]int32, error) {
	ids, err := partitionList(keyval.KEDA, strings.TrimSpace(v))
	if err != nil {
		return nil, configErr("partitionLimitation", v, err.Error())
	}
	return ids, nil
}

func partitionList(_ keyval.Spelling, v string) ([]int32, error) {
	if v == "" {
		return nil, nil
	}
	bad := errors.New
	if len(v) > maxPartitionLimitationBytes {
		return nil, bad(fmt.Sprintf("at most %d bytes", maxPartitionLimitationBytes))
	}
	type span struct{ lo, hi int64 }
	var spans []span
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 32)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseInt(strings.TrimSpace(hi), 10, 32)
		}
		if err != nil || a < 0 || b < a || b >= MaxPartitionID {
			return nil, bad(`ids or ranges such as "0,2,10-20"`)
		}
		spans = append(spans, span{a, b})
	}
	// Overlaps and repeats count once: the list is a set of ids, bounded
	// before anything is expanded, so a short value cannot ask for
	// millions of ids.
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	merged := spans[:1]
	for _, sp := range spans[1:] {
		last := &merged[len(merged)-1]
		if sp.lo <= last.hi+1 {
			last.hi = max(last.hi, sp.hi)
			continue
		}
		merged = append(merged, sp)
	}
	n := int64(0)
	for _, sp := range merged {
		n += sp.hi - sp.lo + 1
	}
	if n > MaxListedPartitions {
		return nil, bad(fmt.Sprintf("at most %d distinct partitions", MaxListedPartitions))
	}
	out := make([]int32, 0, n)
	for _, sp := range merged {
		for p := sp.lo; p <= sp.hi; p++ {
			out = append(out, int32(p))
		}
	}
	return out, nil
}

// MaxListedPartitions bounds partitionLimitation's distinct ids; a topic
// with more partitions than that is not limited partition by partition.
const MaxListedPartitions = 10000

// maxPartitionLimitationBytes bounds the parameter's text.
const maxPartitionLimitationBytes = 4096

// AnnotationPrefix prefixes a lag target's parameters: lag.tidal.dev/mode
// selects the mode, and lag.tidal.dev/<name> sets the parameter <name> of
// ParseConfig.
const AnnotationPrefix = "lag.tidal.dev/"

// FromAnnotations reads a lag target's annotations: lag.tidal.dev/mode
// (default riff-queue) and lag.tidal.dev/<parameter>. Other annotations are
// not ours and are ignored.
func FromAnnotations(ann map[string]string) (Config, error) {
	mode := string(ModeRiffQueue)
	params := map[string]string{}
	for k, v := range ann {
		name, ok := strings.CutPrefix(k, AnnotationPrefix)
		if !ok {
			continue
		}
		if name == "mode" {
			mode = v
			continue
		}
		params[name] = v
	}
	return ParseConfig(mode, params)
}
