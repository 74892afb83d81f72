package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is Knative's internal autoscaling API.
var SchemeGroupVersion = schema.GroupVersion{Group: "autoscaling.internal.knative.dev", Version: "v1alpha1"}

// Resource is the PodAutoscalers' resource.
var Resource = SchemeGroupVersion.WithResource("podautoscalers")

// Kind is the PodAutoscaler's kind.
var Kind = SchemeGroupVersion.WithKind("PodAutoscaler")

var schemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &PodAutoscaler{}, &PodAutoscalerList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
})

// AddToScheme registers the types with a scheme.
var AddToScheme = schemeBuilder.AddToScheme
