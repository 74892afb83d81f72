package engine

import (
	"time"

	"github.com/tidalscale/tidal/decider/keepalive"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/targetkey"
)

// Target names a scalable object.
type Target struct {
	Namespace, Name string
	// APIVersion and Kind select the resource; empty means apps/v1 Deployment.
	APIVersion, Kind string
}

// Key is the target's identity, as in every service (targetkey.Of):
// namespace/name for an apps Deployment, namespace/Kind.group/name else.
func (t Target) Key() string { return targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind) }

// Strategy is a target's scaling algorithm.
type Strategy uint8

const (
	// KPA is Knative's concurrency/RPS autoscaler.
	KPA Strategy = iota + 1
	// Lag scales by Kafka consumer lag.
	Lag
)

func (s Strategy) String() string {
	switch s {
	case KPA:
		return "kpa"
	case Lag:
		return "lag"
	default:
		return "unknown"
	}
}

// Spec is how a target wants to be scaled.
type Spec struct {
	Target   Target
	Strategy Strategy
	// Annotations are Knative's autoscaling.knative.dev/* keys for KPA
	// targets (strategy/kpaconfig), and lag.tidal.dev/* keys for lag
	// targets (strategy/lagconfig).
	Annotations map[string]string
	// ContainerConcurrency is the pods' hard concurrency limit; 0 means none.
	ContainerConcurrency int32
	// Reachable is false when no traffic is routed to the target.
	Reachable bool
	// Advisory targets are decided and explained but never actuated:
	// their decisions say so (Decision.Advisory) and are not sent to the
	// actuator. A KEDA inline Kafka trigger is one.
	Advisory bool
	// KeepAliveState is the predictive keep-alive policy's memory as the
	// target's PodAutoscaler status keeps it (keepalive.State.Encode), ""
	// when it keeps none. A KPA target with the predictive keep-alive
	// starts from it when the engine holds no newer memory of its own.
	KeepAliveState string
	// Knative names the Knative Revision a KPA target is (Knative mode),
	// for Knative's metrics; nil otherwise.
	Knative *KnativeRevision
}

// KnativeRevision names a Knative Revision and what it belongs to.
type KnativeRevision struct {
	Revision, Configuration, Service string
}

// Sample is one measurement of a target.
type Sample struct {
	// At is when it was measured.
	At time.Time
	// Activator is true for pushed (activator) stats, the only ones that poke.
	Activator bool
	// Stat holds the request metrics (KPA).
	Stat kpa.Stat
	// ReadyPods is the ready pod count when measured; negative means unknown.
	ReadyPods int32
	// ReadyOnly marks a change of the ready pod count at At and nothing
	// measured. It waits for its tick like a measurement, so a live decider
	// and one rebuilt from history apply it at the same tick.
	ReadyOnly bool
	// Partitions and PartitionCount are the lag of a lag target's input.
	Partitions     []lag.Partition
	PartitionCount int32
	// MeasureError is set when the collector could not measure the target.
	MeasureError string
}

// Decision is the latest decision for a target, with its inputs.
type Decision struct {
	Target   Target
	Strategy Strategy
	// Sequence is At in Unix milliseconds: it grows with every decision for
	// the target, across decider restarts and replicas.
	Sequence uint64
	At       time.Time
	// Desired is the desired scale; kpa.ScaleUnknown (-1) before the first
	// valid decision.
	Desired int32
	// Reason is one line in words.
	Reason string
	// Panicking and ExcessBurstCapacity are the KPA's state after the decision.
	Panicking           bool
	ExcessBurstCapacity int32
	// MaxScale is the target's max-scale (annotation or config); 0 means
	// unbounded. The strategy's Desired is kept as Knative's decider reports
	// it; Bounded applies this bound, as the reconciler would.
	MaxScale int32
	// MeasureError is the collector's error while it cannot measure the
	// target (a broker down, say); empty when measured.
	MeasureError string
	// SpecError is set when the target's spec was refused; the target then
	// keeps its last decision and is not decided for.
	SpecError string
	// Advisory is the target's Spec.Advisory: nothing applies the
	// decision.
	Advisory bool
	// KPA or Lag holds the strategy's full decision, for Explain.
	KPA *kpa.Decision
	Lag *lag.Decision
	// KeepAlive is the predictive keep-alive policy's decision, for a KPA
	// target that uses it (else nil): Desired is its number, KPA's is
	// Knative's. KeepAliveState is the policy's memory, encoded, for the
	// actuator to keep in the PodAutoscaler's status.
	KeepAlive      *keepalive.Decision
	KeepAliveState string
}

// PredictedIdle reports whether a desired scale of 0 is the keep-alive
// policy's prediction, so the last pod goes without the fixed grace.
func (d *Decision) PredictedIdle() bool { return d.KeepAlive != nil && d.KeepAlive.Predicted }

// Bounded is the desired scale within max-scale: what the actuator is asked
// for. The actuator refuses a value above max-scale.
func (d *Decision) Bounded() int32 {
	if d.MaxScale > 0 && d.Desired > d.MaxScale {
		return d.MaxScale
	}
	return d.Desired
}

// Valid reports whether the decision carries a desired scale to apply.
func (d *Decision) Valid() bool { return d.Desired >= 0 && d.SpecError == "" }
