package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodAutoscaler scales one workload (anything with a scale subresource) with
// one strategy: Knative's KPA on request concurrency or rate, or the Kafka
// consumer-lag strategy of riff and KEDA.
//
// Knative's `autoscaling.knative.dev/*` annotations (class aside: tidal is the
// class) are accepted verbatim on the object and mean what they mean in
// Knative (knative.dev/serving v0.50.0 pkg/apis/autoscaling/register.go): window, target,
// target-utilization-percentage, min-scale, max-scale, initial-scale,
// activation-scale, scale-down-delay, panic-window-percentage,
// panic-threshold-percentage, target-burst-capacity,
// scale-to-zero-pod-retention-period, metric-aggregation-algorithm and their
// legacy camelCase aliases. The API server stores them as they are; they are
// validated where they are read, with Knative's ranges.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tpa,categories=tidal
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scaleTargetRef.name`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredScale`
// +kubebuilder:printcolumn:name="Actual",type=integer,JSONPath=`.status.actualScale`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.status.lastDecision.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PodAutoscalerSpec `json:"spec"`
	// +optional
	Status PodAutoscalerStatus `json:"status,omitempty"`
}

// Strategy names a scaling strategy.
// +kubebuilder:validation:Enum=kpa;lag
type Strategy string

const (
	// StrategyKPA scales on request concurrency or rate as Knative's KPA
	// does: stable and panic windows, rate limits, scale to zero.
	StrategyKPA Strategy = "kpa"
	// StrategyLag scales on the consumer lag of a Kafka topic.
	StrategyLag Strategy = "lag"
)

// ScalingMetric is what the KPA strategy measures per pod.
// +kubebuilder:validation:Enum=concurrency;rps
type ScalingMetric string

const (
	// MetricConcurrency is the time-averaged number of requests in flight.
	MetricConcurrency ScalingMetric = "concurrency"
	// MetricRPS is requests per second.
	MetricRPS ScalingMetric = "rps"
)

// Reachability says whether the workload can receive traffic; an
// unreachable one may scale to zero regardless of min-scale (Knative's
// PodAutoscaler.spec.reachability).
// +kubebuilder:validation:Enum=Reachable;Unreachable;Unknown;""
type Reachability string

const (
	ReachabilityReachable   Reachability = "Reachable"
	ReachabilityUnreachable Reachability = "Unreachable"
	// ReachabilityUnknown (or empty) counts as reachable.
	ReachabilityUnknown Reachability = "Unknown"
)

// PodAutoscalerSpec is what the user asks for.
//
// +kubebuilder:validation:XValidation:rule="self.strategy != 'lag' || has(self.lag)",message="spec.lag is required when spec.strategy is lag"
// +kubebuilder:validation:XValidation:rule="self.strategy != 'kpa' || !has(self.lag)",message="spec.lag is only allowed when spec.strategy is lag"
// +kubebuilder:validation:XValidation:rule="self.strategy == 'kpa' || !has(self.metric)",message="spec.metric is only allowed when spec.strategy is kpa"
type PodAutoscalerSpec struct {
	// ScaleTargetRef is the workload to scale. It must have a scale
	// subresource (Deployment, StatefulSet, ReplicaSet, or a custom resource
	// that declares one) in the PodAutoscaler's namespace.
	ScaleTargetRef ScaleTargetRef `json:"scaleTargetRef"`

	// Strategy picks the algorithm: kpa (the default) or lag.
	// +kubebuilder:default=kpa
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`

	// Metric is what the kpa strategy scales on. Empty means the
	// autoscaling.knative.dev/metric annotation, else concurrency.
	// +optional
	Metric ScalingMetric `json:"metric,omitempty"`

	// ContainerConcurrency is the hard limit of requests one pod serves at
	// once; it caps the per-pod target. 0 means no limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	ContainerConcurrency int64 `json:"containerConcurrency,omitempty"`

	// Reachability of the workload; empty means Unknown, which counts as
	// reachable.
	// +optional
	Reachability Reachability `json:"reachability,omitempty"`

	// Lag configures the lag strategy; required when strategy is lag and
	// refused otherwise.
	// +optional
	Lag *LagSource `json:"lag,omitempty"`
}

// ScaleTargetRef names the scaled object.
type ScaleTargetRef struct {
	// APIVersion of the target, such as apps/v1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind of the target, such as Deployment.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the target, in the PodAutoscaler's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// LagMode picks how consumer lag becomes a replica count.
// +kubebuilder:validation:Enum=riff;keda
type LagMode string

const (
	// LagModeRiff is riff's function-controller: per-partition lag, a cap at
	// the partition count, smoothing and an idle timeout to zero
	// (riff v0.0.5 and v0.0.6+).
	LagModeRiff LagMode = "riff"
	// LagModeKEDA is KEDA's Kafka scaler: total lag over a per-replica
	// threshold (KEDA v2.21.0 pkg/scalers/kafka_scaler.go).
	LagModeKEDA LagMode = "keda"
)

// LagSource says where to read consumer lag and how to turn it into replicas.
//
// +kubebuilder:validation:XValidation:rule="has(self.brokers) != has(self.brokersSecretRef)",message="exactly one of brokers and brokersSecretRef must be set"
// +kubebuilder:validation:XValidation:rule="self.mode != 'riff' || (has(self.topic) && size(self.topic) > 0)",message="topic is required in riff mode"
// +kubebuilder:validation:XValidation:rule="self.mode != 'riff' || !has(self.keda)",message="keda parameters are only allowed in keda mode"
// +kubebuilder:validation:XValidation:rule="self.mode != 'keda' || !has(self.riff)",message="riff parameters are only allowed in riff mode"
type LagSource struct {
	// Brokers are the Kafka bootstrap servers, host:port each.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MinLength=1
	// +optional
	Brokers []string `json:"brokers,omitempty"`
	// BrokersSecretRef names a Secret key holding a comma-separated list of
	// bootstrap servers, for clusters whose addresses are not public config.
	// +optional
	BrokersSecretRef *corev1.SecretKeySelector `json:"brokersSecretRef,omitempty"`

	// Topic whose lag is measured. Required in riff mode; in keda mode empty
	// means every topic the group has committed offsets for.
	// +optional
	Topic string `json:"topic,omitempty"`

	// ConsumerGroup whose committed offsets are compared with the log end.
	// +kubebuilder:validation:MinLength=1
	ConsumerGroup string `json:"consumerGroup"`

	// Mode picks the lag algorithm; riff is the default.
	// +kubebuilder:default=riff
	// +optional
	Mode LagMode `json:"mode,omitempty"`

	// Riff holds the riff mode's parameters.
	// +optional
	Riff *RiffLagParameters `json:"riff,omitempty"`
	// KEDA holds the keda mode's parameters.
	// +optional
	KEDA *KEDALagParameters `json:"keda,omitempty"`
}

// RiffLagParameters tune the riff lag mode. Defaults are riff's
// (riff's Function resource).
type RiffLagParameters struct {
	// MaxReplicas caps the replica count; the effective cap is the smaller of
	// this and the topic's partition count. Unset means the partition count.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
	// IdleTimeout is how long the lag must stay at zero before the last
	// replicas go to zero. Unset means 10s, riff's idleTimeoutMs default.
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`
}

// OffsetResetPolicy is where a group with no committed offset would start.
// +kubebuilder:validation:Enum=latest;earliest
type OffsetResetPolicy string

const (
	OffsetResetLatest   OffsetResetPolicy = "latest"
	OffsetResetEarliest OffsetResetPolicy = "earliest"
)

// KEDALagParameters are KEDA's Kafka scaler parameters, with its defaults
// and meanings (KEDA v2.21.0 pkg/scalers/kafka_scaler.go).
//
// +kubebuilder:validation:XValidation:rule="!(self.allowIdleConsumers && self.limitToPartitionsWithLag)",message="allowIdleConsumers and limitToPartitionsWithLag are incompatible"
// +kubebuilder:validation:XValidation:rule="!(self.ensureEvenDistributionOfPartitions && self.limitToPartitionsWithLag)",message="ensureEvenDistributionOfPartitions and limitToPartitionsWithLag are incompatible"
type KEDALagParameters struct {
	// LagThreshold is the target lag per replica; must be > 0.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +optional
	LagThreshold int64 `json:"lagThreshold,omitempty"`
	// ActivationLagThreshold: the workload is active (scaled from zero) only
	// while the total lag is strictly greater than this.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ActivationLagThreshold int64 `json:"activationLagThreshold,omitempty"`
	// OffsetResetPolicy decides the lag of a partition with no committed
	// offset: latest counts 1, earliest the whole log.
	// +kubebuilder:default=latest
	// +optional
	OffsetResetPolicy OffsetResetPolicy `json:"offsetResetPolicy,omitempty"`
	// AllowIdleConsumers lifts the cap at the partition count.
	// +kubebuilder:default=false
	// +optional
	AllowIdleConsumers bool `json:"allowIdleConsumers"`
	// ScaleToZeroOnInvalidOffset counts a partition with no committed offset
	// as lag 0.
	// +optional
	ScaleToZeroOnInvalidOffset bool `json:"scaleToZeroOnInvalidOffset,omitempty"`
	// ExcludePersistentLag counts a partition whose committed offset did not
	// move since the previous poll as lag 0 for scaling (not for activation).
	// +optional
	ExcludePersistentLag bool `json:"excludePersistentLag,omitempty"`
	// LimitToPartitionsWithLag caps at the number of partitions with lag.
	// +kubebuilder:default=false
	// +optional
	LimitToPartitionsWithLag bool `json:"limitToPartitionsWithLag"`
	// EnsureEvenDistributionOfPartitions rounds the replica count up to a
	// factor of the partition count.
	// +kubebuilder:default=false
	// +optional
	EnsureEvenDistributionOfPartitions bool `json:"ensureEvenDistributionOfPartitions"`
	// PartitionLimitation restricts the partitions considered; empty means
	// all.
	// +listType=set
	// +optional
	PartitionLimitation []int32 `json:"partitionLimitation,omitempty"`
}

// Condition types of a PodAutoscaler.
const (
	// PodAutoscalerConditionReady is True when the autoscaler is scaling the
	// target as asked.
	PodAutoscalerConditionReady = "Ready"
	// PodAutoscalerConditionActive is True while the target has (or is
	// getting) pods to serve, False when scaled to zero, Unknown while
	// activating (Knative's Active condition, knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/kpa/kpa.go).
	PodAutoscalerConditionActive = "Active"
	// PodAutoscalerConditionScaleTargetInitialized is True once the target
	// first reached its initial scale.
	PodAutoscalerConditionScaleTargetInitialized = "ScaleTargetInitialized"
)

// PodAutoscalerStatus is what the actuator observed and decided.
type PodAutoscalerStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// DesiredScale is the last replica count decided; unset until the first
	// decision.
	// +optional
	DesiredScale *int32 `json:"desiredScale,omitempty"`
	// ActualScale is the number of ready pods of the target.
	// +optional
	ActualScale *int32 `json:"actualScale,omitempty"`
	// LastScaleTime is when the actuator last changed the target's replicas.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// MetricName is the Metric object the collector fills for this target.
	// +optional
	MetricName string `json:"metricName,omitempty"`
	// Conditions: Ready, Active, ScaleTargetInitialized.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastDecision is the newest decider decision recorded for the target.
	// Every actuator replica compares a decision's sequence with it before
	// applying the decision, and refuses an older one, so a decision that
	// arrives late never undoes a newer one. Unset until the first decision.
	// +optional
	LastDecision *PodAutoscalerDecision `json:"lastDecision,omitempty"`
}

// PodAutoscalerDecision is one decider decision as the actuator recorded it.
type PodAutoscalerDecision struct {
	// Sequence orders the target's decisions: the decision time in Unix
	// milliseconds, increasing across decider restarts and replicas.
	// +kubebuilder:validation:Minimum=1
	Sequence int64 `json:"sequence"`
	// DesiredScale is the replica count the decider asked for, before the
	// reconciler's rules (min-scale, max-scale, initial scale, the last pod
	// kept until the grace period ends); status.desiredScale is after them.
	// +kubebuilder:validation:Minimum=0
	DesiredScale int32 `json:"desiredScale"`
	// ExcessBurstCapacity is the decider's excess burst capacity in
	// requests (KPA only); negative means the target cannot absorb a burst
	// of its target-burst-capacity. Unset when the decider sent none.
	// +optional
	ExcessBurstCapacity *int32 `json:"excessBurstCapacity,omitempty"`
	// Reason is the decider's explanation, such as "panic: observed
	// concurrency 84 over target 7".
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// PredictedIdle is true when DesiredScale 0 is the predictive
	// keep-alive policy's prediction (autoscaling.tidal.dev/keep-alive:
	// predictive) that no request comes before its pre-warm: the last pod
	// goes as soon as nothing else holds it, without the fixed scale-to-zero
	// grace and pod retention.
	// +optional
	PredictedIdle bool `json:"predictedIdle,omitempty"`
	// KeepAliveState is the predictive keep-alive policy's memory of the
	// target (its idle-time histogram and its last request), written by the
	// decider and recorded here with each of its decisions, so a decider
	// that restarts, or takes the target over, starts from it. Opaque.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]*$`
	// +optional
	KeepAliveState string `json:"keepAliveState,omitempty"`
	// Time is when the actuator recorded the decision.
	Time metav1.Time `json:"time"`
}

// PodAutoscalerList is a list of PodAutoscalers.
//
// +kubebuilder:object:root=true
type PodAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodAutoscaler `json:"items"`
}
