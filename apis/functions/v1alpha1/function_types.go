package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Function is a container that consumes an input Kafka topic, optionally
// produces to an output topic, and is scaled on its consumer lag from zero up
// to the topic's partition count (riff's Function). The
// actuator deploys it as a Deployment named like the Function, with pods
// labelled function=<name>, starting at zero replicas, as riff's Deployer does.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fn,categories=tidal
// +kubebuilder:printcolumn:name="Input",type=string,JSONPath=`.spec.input`
// +kubebuilder:printcolumn:name="Output",type=string,JSONPath=`.spec.output`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.lag`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FunctionSpec `json:"spec"`
	// +optional
	Status FunctionStatus `json:"status,omitempty"`
}

// LagMode picks how the Function's input lag becomes a replica count.
// +kubebuilder:validation:Enum=riff;keda
type LagMode string

const (
	// LagModeRiff is riff's lag scaler.
	LagModeRiff LagMode = "riff"
	// LagModeKEDA is KEDA's Kafka scaler.
	LagModeKEDA LagMode = "keda"
)

// Protocol is how the sidecar talks to the function container.
// +kubebuilder:validation:Enum=http;grpc
type Protocol string

const (
	ProtocolHTTP Protocol = "http"
	ProtocolGRPC Protocol = "grpc"
)

// FunctionSpec is what the user deploys.
type FunctionSpec struct {
	// Container is the user's function. The schema requires a name, as for
	// any container; the deployer renames it "main", as riff does.
	Container corev1.Container `json:"container"`

	// Protocol between the sidecar and the function container.
	// +kubebuilder:default=http
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`

	// Input is the name of the Topic consumed; its lag drives scaling.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	Input string `json:"input"`
	// Output is the name of the Topic results go to; empty means "replies",
	// as in riff.
	// +kubebuilder:validation:MaxLength=249
	// +optional
	Output string `json:"output,omitempty"`

	// MaxReplicas caps the replica count; the effective cap is the smaller
	// of this and the input topic's partition count. Unset means the
	// partition count.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// IdleTimeout is how long the input lag must stay at zero before the
	// Function scales to zero (riff's idleTimeoutMs).
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="idleTimeout must not be negative"
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// LagMode picks the lag algorithm; riff is the default.
	// +kubebuilder:default=riff
	// +optional
	LagMode LagMode `json:"lagMode,omitempty"`
}

// Condition types of a Function.
const (
	// FunctionConditionReady is True when the Function's Deployment exists
	// and its input topic is known.
	FunctionConditionReady = "Ready"
)

// FunctionStatus is what the actuator observed.
type FunctionStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// DeploymentName is the Deployment running the Function.
	// +optional
	DeploymentName string `json:"deploymentName,omitempty"`
	// Replicas is the Deployment's current replica count.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of ready pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Lag is the input topic's total consumer lag at the last decision.
	// +optional
	Lag int64 `json:"lag,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FunctionList is a list of Functions.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}
