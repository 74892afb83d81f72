// Package v1alpha1 is Knative Serving's autoscaling.internal.knative.dev/v1alpha1
// PodAutoscaler as tidal's Knative mode reads and writes it, from the wire
// format of knative.dev/serving v0.50.0 (pkg/apis/autoscaling/v1alpha1/pa_types.go
// and the CRD config/core/300-resources/podautoscaler.yaml). Knative's
// revision reconciler creates one per Revision, named like it; the reconciler
// of its class writes its status.
//
// Knative owns these CRDs: hack/update-crds.sh must not emit its own.
// +kubebuilder:skip
// +kubebuilder:object:generate=true
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/apis/knative/duck"
)

// Knative's PodAutoscaler classes (annotation autoscaling.knative.dev/class).
const (
	// ClassKPA is Knative's own autoscaler's class, the default when the
	// annotation is absent.
	ClassKPA = "kpa.autoscaling.knative.dev"
	// ClassHPA is Knative's HPA-backed class; tidal never takes it.
	ClassHPA = "hpa.autoscaling.knative.dev"
	// ClassTidal is the class that selects tidal alone, for side-by-side
	// trials beside Knative's own autoscaler. Not under knative.dev: Knative's
	// webhook refuses every class there but its KPA and HPA ones
	// (knative.dev/serving v0.50.0 pkg/apis/autoscaling/annotation_validation.go).
	ClassTidal = "kpa.autoscaling.tidal.dev"
)

// Labels and annotations Knative sets.
const (
	AnnotationClass = "autoscaling.knative.dev/class"
	// LabelRevision names the Revision on its pods and its PodAutoscaler.
	LabelRevision = "serving.knative.dev/revision"
	// LabelConfiguration and LabelService name the Revision's
	// Configuration and Service (absent for a Configuration of no
	// Service) on its PodAutoscaler.
	LabelConfiguration = "serving.knative.dev/configuration"
	LabelService       = "serving.knative.dev/service"
)

// Conditions of a PodAutoscaler; Ready derives from the other three.
const (
	ConditionReady                  = duck.ConditionReady
	ConditionActive                 = "Active"
	ConditionScaleTargetInitialized = "ScaleTargetInitialized"
	ConditionSKSReady               = "SKSReady"
)

// Reachability says whether a Route reaches the Revision.
type Reachability string

const (
	ReachabilityUnknown     Reachability = ""
	ReachabilityReachable   Reachability = "Reachable"
	ReachabilityUnreachable Reachability = "Unreachable"
)

// ProtocolType is the revision's protocol: http1 or h2c.
type ProtocolType string

const (
	ProtocolHTTP1 ProtocolType = "http1"
	ProtocolH2C   ProtocolType = "h2c"
)

// +kubebuilder:object:root=true

// PodAutoscaler asks its class's reconciler to scale one Revision's
// Deployment.
type PodAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodAutoscalerSpec   `json:"spec,omitempty"`
	Status PodAutoscalerStatus `json:"status,omitempty"`
}

// PodAutoscalerSpec is what Knative's revision reconciler writes.
type PodAutoscalerSpec struct {
	// ContainerConcurrency is the revision's hard limit of requests in
	// flight per container; 0 means none.
	ContainerConcurrency int64 `json:"containerConcurrency,omitempty"`
	// ScaleTargetRef is the /scale-able resource, the revision's Deployment.
	ScaleTargetRef corev1.ObjectReference `json:"scaleTargetRef"`
	// Reachability of the Revision.
	Reachability Reachability `json:"reachability,omitempty"`
	// ProtocolType of the Revision.
	ProtocolType ProtocolType `json:"protocolType"`
}

// PodAutoscalerStatus is what the class's reconciler writes.
type PodAutoscalerStatus struct {
	duck.Status `json:",inline"`
	// ServiceName is the ServerlessService's public Kubernetes Service.
	ServiceName string `json:"serviceName"`
	// MetricsServiceName is the ServerlessService's private Service.
	MetricsServiceName string `json:"metricsServiceName"`
	// DesiredScale is the scale the autoscaler wants; nil before it knows.
	DesiredScale *int32 `json:"desiredScale,omitempty"`
	// ActualScale is the number of ready pods.
	ActualScale *int32 `json:"actualScale,omitempty"`
}

// +kubebuilder:object:root=true

// PodAutoscalerList is a list of PodAutoscalers.
type PodAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []PodAutoscaler `json:"items"`
}

// Class is the PodAutoscaler's class, ClassKPA when it names none.
func (pa *PodAutoscaler) Class() string {
	if c, ok := pa.Annotations[AnnotationClass]; ok {
		return c
	}
	return ClassKPA
}

// Revision is the name of the PodAutoscaler's Revision: its revision label,
// or its own name (Knative names it like the Revision).
func (pa *PodAutoscaler) Revision() string {
	if r := pa.Labels[LabelRevision]; r != "" {
		return r
	}
	return pa.Name
}
