package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topic is a Kafka topic that Functions read and write (riff's Topic). Its
// partition count caps how many replicas of a consuming Function can do work.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=tidal
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.spec.partitions`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Topic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TopicSpec `json:"spec,omitempty"`
	// +optional
	Status TopicStatus `json:"status,omitempty"`
}

// TopicSpec is the topic's shape.
type TopicSpec struct {
	// Partitions is the number of partitions; riff's default is 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Partitions *int32 `json:"partitions,omitempty"`
}

// Condition types of a Topic.
const (
	// TopicConditionReady is True when the topic exists in Kafka with at
	// least spec.partitions partitions.
	TopicConditionReady = "Ready"
)

// TopicStatus is what the actuator observed in Kafka.
type TopicStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Partitions is the partition count Kafka reports.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TopicList is a list of Topics.
//
// +kubebuilder:object:root=true
type TopicList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topic `json:"items"`
}
