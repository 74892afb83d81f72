// Package v1alpha1 is the functions.tidal.dev/v1alpha1 API: Function, a
// container that consumes an input Kafka topic and is scaled on its consumer
// lag, and Topic, the partitioned topic it reads. They follow riff's Function
// and Topic; the actuator's function Deployer turns a Function into a
// Deployment as riff's Deployer does.
//
// The CRD manifests in charts/tidal/crds are generated from these types by
// hack/update-crds.sh; edit the types, never the YAML.
//
// +kubebuilder:object:generate=true
// +groupName=functions.tidal.dev
package v1alpha1
