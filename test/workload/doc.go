// Package workload simulates the user workloads tidal scales, against a real
// API server, so tests and `make run` exercise the real scraping and scaling
// paths without containers.
//
// HTTP side (Workload): for every Ready pod of a Deployment it serves what
// Knative's queue-proxy serves at that pod's IP, port 9090, /metrics: the
// protobuf Stat of the last 1 s reporting period (knative.dev/serving v0.50.0 pkg/autoscaler/metrics/stat.proto),
// and optionally the old Prometheus text series on another port. The numbers
// come from a load model (Model, sim/podmodel): requests arrive following a Profile, go to
// the least-loaded warm pod, are served ContainerConcurrency at a time per pod
// and queue beyond that, and a new pod serves only after a cold-start delay.
// Report says what users would have felt: requests served, queued, and
// waiting-time percentiles.
//
// Kafka side: Consumers runs one group consumer per Ready pod of a Function,
// processing records at a fixed rate per pod and committing offsets as riff's
// sidecar does; Producer writes to a topic at a Profile's rate. Both talk to
// any Kafka-protocol broker; tests use kfake.
//
// Pod IPs of the test cluster are loopback addresses (test/cluster), so this
// process can listen on each pod's address.
package workload
