// Package window holds time-bucketed windows of float64 samples with one-second
// buckets, averaged either linearly (Knative's default) or with weighted
// exponential decay.
//
// A Window is a ring buffer sized to its length in seconds. Record and the
// averages never allocate, and time is always passed in, so a window can be
// rebuilt by replaying its history and is safe to benchmark.
//
// The arithmetic follows Knative Serving's pkg/autoscaler/aggregation
// (bucketing.go, knative.dev/serving v0.50.0), down to the order of
// floating-point operations, so averages match Knative's to the last bit.
package window
