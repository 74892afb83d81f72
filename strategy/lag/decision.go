package lag

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Status says what a Decision is based on.
type Status int8

const (
	// StatusOK: decided from this tick's data.
	StatusOK Status = iota
	// StatusNoData: no usable data this tick (fetch failed, or nothing
	// observed since the last tick); the previous decision is held.
	StatusNoData
	// StatusBadInput: the input was rejected (Err names the field and the
	// value); the previous decision is held.
	StatusBadInput
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNoData:
		return "no-data"
	case StatusBadInput:
		return "bad-input"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// LagRule says how a partition's lag was derived.
type LagRule int8

const (
	// LagPlain: end - committed.
	LagPlain LagRule = iota
	// LagNoCommitFromZero: no committed offset; riff counts from offset 0,
	// charging the whole log.
	LagNoCommitFromZero
	// LagNoCommitLatest: no committed offset; KEDA's latest policy charges 1
	// (0 with scaleToZeroOnInvalidOffset).
	LagNoCommitLatest
	// LagNoCommitEarliest: no committed offset; KEDA's earliest policy charges
	// the end offset (0 with scaleToZeroOnInvalidOffset).
	LagNoCommitEarliest
	// LagCommittedAhead: committed > end (topic recreated, stale metadata).
	// Counted as 0 except in faithful keda, which sums the negative value.
	LagCommittedAhead
	// LagPersistent: KEDA excludePersistentLag; the committed offset did not
	// move since the previous poll, so the lag counts for activation only.
	LagPersistent
	// LagNotSelected: not in KEDA's partitionLimitation; ignored.
	LagNotSelected
)

var lagRuleNames = [...]string{"plain", "no-commit-from-zero", "no-commit-latest", "no-commit-earliest",
	"committed-ahead", "persistent", "not-selected"}

func (r LagRule) String() string {
	if int(r) < len(lagRuleNames) {
		return lagRuleNames[r]
	}
	return fmt.Sprintf("LagRule(%d)", int(r))
}

// PartitionLag is one partition's contribution to a Decision.
type PartitionLag struct {
	// Topic is the partition's, when the input has several; else empty.
	Topic        string
	ID           int32
	End          int64
	Committed    int64
	HasCommitted bool
	// Lag counts toward the proposal (riff) or the metric (keda).
	Lag int64
	// LagWithPersistent counts toward KEDA's activation; equal to Lag
	// elsewhere.
	LagWithPersistent int64
	Rule              LagRule
}

// CapReason says which bound limited the proposal.
type CapReason int8

const (
	// CapNone: nothing limited the proposal.
	CapNone CapReason = iota
	// CapMaxReplicas: the configured maxReplicas / maxReplicaCount.
	CapMaxReplicas
	// CapPartitions: the topic's partition count (replicas beyond it idle).
	CapPartitions
	// CapDeclaredPartitions: riff's Topic resource partitions (faithful).
	CapDeclaredPartitions
	// CapNoTopicResource: faithful riff without a Topic resource caps at 1.
	CapNoTopicResource
	// CapLaggingPartitions: fixed riff caps at the partitions that have lag,
	// so one hot partition cannot drive the function to the cap.
	CapLaggingPartitions
	// CapPartitionsWithLag: KEDA limitToPartitionsWithLag.
	CapPartitionsWithLag
)

var capReasonNames = [...]string{"none", "maxReplicas", "partition count", "Topic resource partitions",
	"no Topic resource", "partitions with lag", "partitions with lag (limitToPartitionsWithLag)"}

func (c CapReason) String() string {
	if int(c) < len(capReasonNames) {
		return capReasonNames[c]
	}
	return fmt.Sprintf("CapReason(%d)", int(c))
}

// Smoothing is the state of riff's 5 %-per-tick EMA.
type Smoothing struct {
	// Before and After are the float32 memory before and after this tick.
	Before, After float32
	// Rounded is int(0.5 + After), or 1 when FromZero.
	Rounded int32
	// FromZero: the 0→1 special case fired (target > 0 at 0 replicas), which
	// also resets the memory to 1.
	FromZero bool
}

// Idle is the countdown to zero.
type Idle struct {
	// Counting: a countdown is running; Deadline is when it releases.
	Counting bool
	Deadline time.Time
	// Holding: the countdown kept Held replicas this tick.
	Holding bool
	Held    int32
	// Restarted: activity restarted the countdown this tick.
	Restarted bool
}

// KEDAResult holds KEDA's metric, activity and the HPA arithmetic.
type KEDAResult struct {
	// TotalLagBeforeCap is Σ Lag; TotalLag is the value after the cap.
	TotalLagBeforeCap int64
	TotalLag          int64
	// UpperBound is the replica bound of the cap (partitions, or partitions
	// with lag); CapApplies says whether the cap is in force at all.
	UpperBound int64
	CapApplies bool
	// Metric is what KEDA reports to the HPA (negative becomes 0).
	Metric float64
	// Active: TotalLagWithPersistent > ActivationLagThreshold.
	Active                 bool
	ActivationLagThreshold int64
	// LastActive is the last tick that was active (zero if never);
	// CooldownDeadline is when an inactive target may go to minReplicaCount.
	LastActive       time.Time
	CooldownDeadline time.Time
	// Recommendation is the HPA's ceil(metric / lagThreshold) after
	// tolerance and clamping; WithinTolerance says the current count was kept.
	Recommendation  int32
	WithinTolerance bool
	// Stabilized is the highest recommendation within the scale-down window.
	Stabilized int32
}

// Reason is why a Decision came out as it did.
type Reason int8

const (
	ReasonHoldNoData Reason = iota
	ReasonHoldBadInput
	ReasonIdle
	ReasonFromZero
	ReasonProposal
	ReasonIdleHold
	ReasonIdleExpired
	ReasonStalledHold
	ReasonQueueHold
	ReasonActivate
	ReasonCooldown
	ReasonCooldownHold
	ReasonTolerance
	ReasonStabilized
)

// Decision is one target's result for one tick, with everything Explain
// shows. Partitions aliases the target's buffer until its next tick; Set's
// Explain hands out a copy.
type Decision struct {
	Mode     lagconfig.Mode
	Faithful bool
	Time     time.Time
	Status   Status
	// Err wraps ErrNoData or ErrBadInput when Status is not StatusOK.
	Err error

	Partitions        []PartitionLag
	PartitionCount    int32
	LaggingPartitions int32
	MaxLag            int64
	TotalLag          int64
	// TotalLagWithPersistent is KEDA's activation sum; TotalLag elsewhere.
	TotalLagWithPersistent int64
	// Writes is riff-queue's producer count for the tick; WritesDerived says
	// it came from end-offset growth.
	Writes        int64
	WritesDerived bool

	// ReplicasBefore is the count the strategy started from (faithful riff:
	// the controller's actualReplicas; fixed: its own last decision, or the
	// observed count on the first tick).
	ReplicasBefore   int32
	ObservedReplicas int32
	ObservedKnown    bool

	// Proposal is the raw proposal: riff-offset's policy output, riff-queue's
	// writes-or-queue value, KEDA's HPA recommendation.
	Proposal int32
	// Cap bounds the proposal; Target is the proposal after it.
	Cap       int32
	CapReason CapReason
	Target    int32

	Smoothing Smoothing
	// QueueLength is riff-queue's queue (Σ lag, -1 when the query failed);
	// QueueLengthCalls is 2 when the hold-while-non-empty stage re-queried.
	QueueLength      int64
	QueueLengthCalls int8
	// Stalled: riff-offset refused to scale up because no offset moved.
	Stalled bool
	Idle    Idle
	KEDA    KEDAResult

	Desired int32
	// ScaleNeeded: the actuator must apply Desired (faithful riff: it
	// differs from actualReplicas; fixed: it differs from the observed count,
	// so a failed Scale is retried every tick).
	ScaleNeeded bool
	Reason      Reason
}

// Summary is a one-line human reason.
func (d *Decision) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", d.Mode)
	if d.Faithful {
		b.WriteString(" (faithful)")
	}
	fmt.Fprintf(&b, ": %d -> %d: ", d.ReplicasBefore, d.Desired)
	switch d.Reason {
	case ReasonHoldNoData:
		fmt.Fprintf(&b, "holding, no data (%v)", d.Err)
		return b.String()
	case ReasonHoldBadInput:
		fmt.Fprintf(&b, "holding, %v", d.Err)
		return b.String()
	case ReasonIdle:
		b.WriteString("idle")
	case ReasonFromZero:
		b.WriteString("work arrived at 0 replicas: start 1 at once")
	case ReasonProposal:
		b.WriteString("following the smoothed proposal")
	case ReasonIdleHold:
		fmt.Fprintf(&b, "idle, holding %d until %s", d.Idle.Held, d.Idle.Deadline.Format(time.RFC3339Nano))
	case ReasonIdleExpired:
		b.WriteString("idle timeout expired")
	case ReasonStalledHold:
		b.WriteString("no offset moved since the last tick (rebalancing?): not scaling up")
	case ReasonQueueHold:
		b.WriteString("queue not empty: keeping 1")
	case ReasonActivate:
		fmt.Fprintf(&b, "active (lag %d > activation %d): scale from zero", d.TotalLagWithPersistent, d.KEDA.ActivationLagThreshold)
	case ReasonCooldown:
		b.WriteString("inactive past the cooldown")
	case ReasonCooldownHold:
		fmt.Fprintf(&b, "inactive, cooldown until %s", d.KEDA.CooldownDeadline.Format(time.RFC3339Nano))
	case ReasonTolerance:
		b.WriteString("metric within the HPA tolerance")
	case ReasonStabilized:
		fmt.Fprintf(&b, "scale-down stabilized at %d", d.KEDA.Stabilized)
	}
	switch d.Mode {
	case lagconfig.ModeRiffOffset:
		fmt.Fprintf(&b, "; max partition lag %d, policy %d", d.MaxLag, d.Proposal)
	case lagconfig.ModeRiffQueue:
		fmt.Fprintf(&b, "; queue %d, writes %d, proposal %d", d.QueueLength, d.Writes, d.Proposal)
	case lagconfig.ModeKEDA:
		fmt.Fprintf(&b, "; total lag %d, metric %g, recommendation %d", d.KEDA.TotalLagBeforeCap, d.KEDA.Metric, d.KEDA.Recommendation)
	}
	if d.CapReason != CapNone {
		fmt.Fprintf(&b, ", capped at %d by %s", d.Cap, d.CapReason)
	}
	return b.String()
}

// clone returns a copy whose Partitions does not alias the target's buffer.
func (d Decision) clone() Decision {
	d.Partitions = append([]PartitionLag(nil), d.Partitions...)
	return d
}
