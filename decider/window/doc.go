// Package window holds time-bucketed windows with one-second buckets,
// averaged either linearly (Knative's default) or with weighted exponential
// decay. A window holds two float64 series recorded at the same times, as
// the KPA records concurrency and request counts, each averaged on its own.
//
// A Window is a ring buffer sized to its length in seconds. Record and the
// averages never allocate, and time is always passed in, so a window can be
// rebuilt by replaying its history and is safe to benchmark.
//
// The arithmetic follows Knative Serving's pkg/autoscaler/aggregation
// (bucketing.go, knative.dev/serving v0.50.0), down to the order of
// floating-point operations, so each series' averages match those of
// Knative's window for it to the last bit.
package window
