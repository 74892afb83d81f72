// Package keda drives tidal's external scaler (externalscaler.ExternalScaler
// on the collector) through KEDA's own client code: the external and
// external-push scalers of github.com/kedacore/keda/v2/pkg/scalers, built
// from the example ScaledObjects (examples/keda, shown in docs/keda.md) and
// the chart's ClusterTriggerAuthentication as KEDA's operator builds them,
// over real gRPC with mutual TLS, against the three services running as
// processes on a test cluster (test/cluster, test/system); and KEDA's own
// operator and metrics API server (test/keda/operator builds them) with
// kube-controller-manager's HPA scaling Deployments through tidal.
//
// It is a module of its own so that KEDA's dependencies stay out of tidal's
// go.mod; tidal comes from the checkout (replace ../..). The package must
// never import tidal's proto/externalscaler or collector/kedascaler: they
// register the protobuf names externalscaler.* that KEDA's generated code
// registers too, and the two cannot share a binary.
//
// Run it with `make keda`, which compiles KEDA first (about 20 minutes on
// two cores the first time, then cached) and then runs the tests.
package keda
