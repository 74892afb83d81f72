// Package v1alpha1 is Knative's networking.internal.knative.dev/v1alpha1
// ServerlessService as tidal's Knative mode writes and reads it, from the
// wire format of knative.dev/networking at the version knative.dev/serving
// v0.50.0 requires (pkg/apis/networking/v1alpha1/serverlessservice_types.go
// and config/serverlessservice.yaml). A PodAutoscaler's class reconciler
// creates and owns it, named like the PodAutoscaler, and sets its spec;
// Knative's controller reconciles it into the public and private Services
// and writes its status.
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

// Mode is where the public Service sends traffic.
type Mode string

const (
	// ModeServe routes traffic to the revision's pods.
	ModeServe Mode = "Serve"
	// ModeProxy routes traffic through the activator.
	ModeProxy Mode = "Proxy"
)

// Conditions of a ServerlessService.
const (
	ConditionReady              = duck.ConditionReady
	ConditionEndpointsPopulated = "EndpointsPopulated"
	ConditionActivatorEndpoints = "ActivatorEndpointsPopulated"
)

// +kubebuilder:object:root=true

// ServerlessService puts the activator in or out of a revision's path.
type ServerlessService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerlessServiceSpec   `json:"spec,omitempty"`
	Status ServerlessServiceStatus `json:"status,omitempty"`
}

// ServerlessServiceSpec is what the PodAutoscaler's reconciler writes.
type ServerlessServiceSpec struct {
	// Mode is Serve or Proxy.
	Mode Mode `json:"mode,omitempty"`
	// ObjectRef is the revision's Deployment, whose pods back the private
	// Service.
	ObjectRef corev1.ObjectReference `json:"objectRef"`
	// ProtocolType is the revision's protocol, http1 or h2c.
	ProtocolType string `json:"protocolType"`
	// NumActivators is how many activators to put in the path in Proxy mode;
	// 0 means all.
	NumActivators int32 `json:"numActivators,omitempty"`
}

// ServerlessServiceStatus is what Knative's controller writes.
type ServerlessServiceStatus struct {
	duck.Status `json:",inline"`
	// ServiceName is the public Service.
	ServiceName string `json:"serviceName,omitempty"`
	// PrivateServiceName is the private Service, backed by the pods alone.
	PrivateServiceName string `json:"privateServiceName,omitempty"`
}

// +kubebuilder:object:root=true

// ServerlessServiceList is a list of ServerlessServices.
type ServerlessServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []ServerlessService `json:"items"`
}
