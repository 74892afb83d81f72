// Package kpaconfig parses and validates Knative's config-autoscaler keys and
// autoscaling.knative.dev/* annotations, verbatim, with Knative's defaults and
// ranges, and resolves them into the decider's kpaspec.Spec (knative.dev/serving
// v0.50.0 pkg/autoscaler/config and pkg/apis/autoscaling).
//
// Unlike Knative's accessors, which fall back to the config when an
// annotation does not parse, every bad value is refused with an error naming
// the key and the value: nothing is silently replaced by a default.
package kpaconfig
