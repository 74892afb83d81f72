package kedascaler

import (
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/collector/lag"
)

// Config bounds the external scaler's calls and streams.
type Config struct {
	// CallTimeout bounds each call to a decider: KEDA sets no deadline of
	// its own, and a call that hangs would hold KEDA's scaling loop.
	CallTimeout time.Duration
	// MaxStreams bounds the StreamIsActive and StreamMetricSpec streams
	// open on this collector; MaxStreamsPerCaller those of one caller
	// identity; MaxStreamsPerNamespace those of one ScaledObject namespace,
	// so that one tenant's ScaledObjects cannot take every stream KEDA's
	// one identity may hold. KEDA opens one of each per external-push
	// trigger.
	MaxStreams             int
	MaxStreamsPerCaller    int
	MaxStreamsPerNamespace int
	// CallRate and CallBurst bound the calls (and stream openings) made
	// for the ScaledObjects of one namespace, a token bucket per namespace:
	// each costs a decider call or a Kafka read, and KEDA makes them all
	// under one identity.
	CallRate  float64
	CallBurst int
	// MaxWatches bounds this collector's WatchDecisions streams to deciders
	// (one per decider and namespace, shared by every KEDA stream there).
	// The deciders bound them too, per caller identity
	// (--watch-max-streams-per-caller), which every collector replica
	// shares.
	MaxWatches int
	// OwnerCheck is how often open streams look for a target's owning
	// decider having changed.
	OwnerCheck time.Duration
	// MinBackoff and MaxBackoff bound the wait before a broken watch of a
	// decider is reopened.
	MinBackoff, MaxBackoff time.Duration

	// Inline Kafka triggers (see Triggers).

	// TargetTTL is how long an inline Kafka target lives without a KEDA
	// call naming it; then it is forgotten here and by its decider.
	TargetTTL time.Duration
	// MaxTargets bounds the inline Kafka targets this collector measures;
	// they count against --max-targets too.
	MaxTargets int
	// MaxPolls bounds the Kafka reads for KEDA's calls in flight at once;
	// more wait, up to CallTimeout.
	MaxPolls int
	// PollRate and PollBurst bound the inline Kafka calls made for the
	// ScaledObjects of one namespace (a token bucket): each may read Kafka.
	PollRate  float64
	PollBurst int
	// ActivityReuse is how old a trigger's latest poll may be for IsActive
	// to answer from it rather than poll again: KEDA calls IsActive right
	// after GetMetrics, in one GetMetricsAndActivity.
	ActivityReuse time.Duration
	// StreamPoll is how often a StreamIsActive stream of a keda-mode
	// trigger reads the offsets for KEDA's activity: KEDA's own activity
	// is known only at a read, and the stream is there to beat KEDA's
	// pollingInterval (30 s by default) from zero.
	StreamPoll time.Duration
	// Brokers are the Kafka brokers inline triggers may make this
	// collector reach: the collector's one policy for every lag source
	// (--kafka-brokers, --allowed-brokers), set by its caller.
	Brokers lag.BrokerPolicy
}

// RegisterFlagsWithPrefix registers the flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.DurationVar(&c.CallTimeout, p+"call-timeout", 5*time.Second, "Longest wait for a decider's answer to a KEDA call; beyond it KEDA gets UNAVAILABLE.")
	fs.IntVar(&c.MaxStreams, p+"max-streams", 1024, "KEDA streams (StreamIsActive, StreamMetricSpec) open at once on this collector; one more is refused with RESOURCE_EXHAUSTED.")
	fs.IntVar(&c.MaxStreamsPerCaller, p+"max-streams-per-caller", 1024, "KEDA streams open at once for one caller identity; one more is refused.")
	fs.IntVar(&c.MaxStreamsPerNamespace, p+"max-streams-per-namespace", 128, "KEDA streams open at once for the ScaledObjects of one namespace; one more is refused, so one tenant cannot take every stream.")
	fs.Float64Var(&c.CallRate, p+"namespace-call-rate", 100, "KEDA calls (and stream openings) per second for the ScaledObjects of one namespace; more get RESOURCE_EXHAUSTED. KEDA makes about two per trigger per pollingInterval and HPA sync.")
	fs.IntVar(&c.CallBurst, p+"namespace-call-burst", 200, "KEDA calls for one namespace's ScaledObjects at once above --"+p+"namespace-call-rate.")
	fs.IntVar(&c.MaxWatches, p+"max-watches", 8, "WatchDecisions streams this collector keeps to deciders for KEDA streams (one per decider and namespace); keep it below the deciders' --watch-max-streams-per-caller divided by the collector replicas.")
	fs.DurationVar(&c.OwnerCheck, p+"owner-check-interval", time.Second, "How often KEDA streams look for their target having moved to another decider.")
	fs.DurationVar(&c.MinBackoff, p+"watch-min-backoff", 100*time.Millisecond, "First wait before reopening a broken watch of a decider.")
	fs.DurationVar(&c.MaxBackoff, p+"watch-max-backoff", 5*time.Second, "Longest wait before reopening a broken watch of a decider.")
	fs.DurationVar(&c.TargetTTL, p+"target-ttl", 10*time.Minute, "How long an inline Kafka target lives without a KEDA call naming it; keep it above the ScaledObjects' pollingInterval.")
	fs.IntVar(&c.MaxTargets, p+"max-targets", 1000, "Inline Kafka targets (KEDA triggers with bootstrapServers) this collector measures at most; one more is refused with RESOURCE_EXHAUSTED.")
	fs.IntVar(&c.MaxPolls, p+"max-polls", 32, "Kafka reads for KEDA's inline Kafka calls in flight at once on this collector; more wait.")
	fs.Float64Var(&c.PollRate, p+"poll-rate", 200, "Inline Kafka calls (GetMetrics, IsActive, StreamIsActive) per second for the ScaledObjects of one namespace; each may read Kafka.")
	fs.IntVar(&c.PollBurst, p+"poll-burst", 400, "Inline Kafka calls for one namespace's ScaledObjects at once above --keda-poll-rate.")
	fs.DurationVar(&c.StreamPoll, p+"stream-poll-interval", 5*time.Second, "How often a StreamIsActive stream (external-push) of an inline Kafka trigger in keda mode reads the offsets and pushes KEDA's activity when it changes; keep it below the ScaledObjects' pollingInterval. Each read counts against --keda-poll-rate.")
	fs.DurationVar(&c.ActivityReuse, p+"activity-reuse", 2*time.Second, "IsActive of an inline Kafka trigger in keda mode answers from the trigger's latest poll while it is at most this old (KEDA calls it right after GetMetrics); 0 means every IsActive polls.")
}

// Validate refuses values that would disable a bound, naming the flag.
func (c *Config) Validate(p string) error {
	switch {
	case c.CallTimeout <= 0:
		return fmt.Errorf("--%scall-timeout %s: want more than 0", p, c.CallTimeout)
	case c.MaxStreams < 1:
		return fmt.Errorf("--%smax-streams %d: want at least 1", p, c.MaxStreams)
	case c.MaxStreamsPerCaller < 1 || c.MaxStreamsPerCaller > c.MaxStreams:
		return fmt.Errorf("--%smax-streams-per-caller %d: want 1 to --%smax-streams (%d)", p, c.MaxStreamsPerCaller, p, c.MaxStreams)
	case c.MaxStreamsPerNamespace < 1 || c.MaxStreamsPerNamespace > c.MaxStreams:
		return fmt.Errorf("--%smax-streams-per-namespace %d: want 1 to --%smax-streams (%d)", p, c.MaxStreamsPerNamespace, p, c.MaxStreams)
	case !(c.CallRate > 0) || math.IsInf(c.CallRate, 0):
		return fmt.Errorf("--%snamespace-call-rate %g: want a finite number above 0", p, c.CallRate)
	case c.CallBurst < 1:
		return fmt.Errorf("--%snamespace-call-burst %d: want at least 1", p, c.CallBurst)
	case c.MaxWatches < 1:
		return fmt.Errorf("--%smax-watches %d: want at least 1", p, c.MaxWatches)
	case c.OwnerCheck <= 0:
		return fmt.Errorf("--%sowner-check-interval %s: want more than 0", p, c.OwnerCheck)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("--%swatch-min-backoff %s, --%swatch-max-backoff %s: want 0 < min <= max", p, c.MinBackoff, p, c.MaxBackoff)
	case c.TargetTTL <= 0:
		return fmt.Errorf("--%starget-ttl %s: want more than 0", p, c.TargetTTL)
	case c.MaxTargets < 1:
		return fmt.Errorf("--%smax-targets %d: want at least 1", p, c.MaxTargets)
	case c.MaxPolls < 1:
		return fmt.Errorf("--%smax-polls %d: want at least 1", p, c.MaxPolls)
	case !(c.PollRate > 0) || math.IsInf(c.PollRate, 0):
		return fmt.Errorf("--%spoll-rate %g: want a finite number above 0", p, c.PollRate)
	case c.PollBurst < 1:
		return fmt.Errorf("--%spoll-burst %d: want at least 1", p, c.PollBurst)
	case c.StreamPoll <= 0:
		return fmt.Errorf("--%sstream-poll-interval %s: want more than 0", p, c.StreamPoll)
	case c.ActivityReuse < 0:
		return fmt.Errorf("--%sactivity-reuse %s: want at least 0", p, c.ActivityReuse)
	}
	return nil
}
