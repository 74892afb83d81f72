// Package v1alpha1 is the autoscaling.tidal.dev/v1alpha1 API: PodAutoscaler,
// which asks tidal to scale one workload with a strategy, and Metric, which
// tells the collector what to collect for it. They follow Knative's
// PodAutoscaler and Metric (knative.dev/serving v0.50.0 pkg/apis/autoscaling/v1alpha1) and add the Kafka-lag
// strategy of riff and KEDA. The actuator owns and reconciles these objects.
//
// The CRD manifests in charts/tidal/crds are generated from these types by
// hack/update-crds.sh; edit the types, never the YAML.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.tidal.dev
package v1alpha1
