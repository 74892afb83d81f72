package kpa

import "github.com/tidalscale/tidal/strategy/kpaspec"

// The spec, metric and status types are shared with the actuator and
// strategy/kpaconfig; the decider names them here as it always has.
type (
	// Metric is the quantity a target scales on.
	Metric = kpaspec.Metric
	// Spec is what the decider is asked to do for one target.
	Spec = kpaspec.Spec
	// Status is what the decider reports for a target.
	Status = kpaspec.Status
)

const (
	// Concurrency scales on in-flight requests (Knative's default).
	Concurrency = kpaspec.Concurrency
	// RPS scales on requests per second.
	RPS = kpaspec.RPS
	// ScaleUnknown is the desired scale before the first valid decision.
	ScaleUnknown = kpaspec.ScaleUnknown
)
