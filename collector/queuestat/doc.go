// Package queuestat encodes and decodes the Stat message that Knative's
// queue-proxy serves on port 9090 at /metrics (Content-Type
// application/protobuf), so tidal's collector can scrape unmodified Knative
// workloads and tidal's simulated workload can serve the same bytes.
//
// The wire format is written by hand with protowire rather than generated from
// a copy of Knative's stat.proto: the message is seven scalar fields, and the
// field numbers and types are all a decoder needs (knative.dev/serving v0.50.0 pkg/autoscaler/metrics/stat.proto).
package queuestat
