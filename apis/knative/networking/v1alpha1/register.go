package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is Knative's internal networking API.
var SchemeGroupVersion = schema.GroupVersion{Group: "networking.internal.knative.dev", Version: "v1alpha1"}

// Resource is the ServerlessServices' resource.
var Resource = SchemeGroupVersion.WithResource("serverlessservices")

// Kind is the ServerlessService's kind.
var Kind = SchemeGroupVersion.WithKind("ServerlessService")

var schemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ServerlessService{}, &ServerlessServiceList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
})

// AddToScheme registers the types with a scheme.
var AddToScheme = schemeBuilder.AddToScheme
