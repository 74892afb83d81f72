// Package knative holds the Go types of the few Knative Serving objects
// tidal's Knative mode reads and writes, written from their wire format at
// knative.dev/serving v0.50.0 (knative-v1.23) so that tidal's module does not
// depend on Knative's: the PodAutoscaler
// (autoscaling.internal.knative.dev/v1alpha1, in autoscaling/v1alpha1) and
// the ServerlessService (networking.internal.knative.dev/v1alpha1, in
// networking/v1alpha1), their duck-typed status and conditions (duck), and a
// typed client and informers for them (client). Only the fields tidal uses
// are declared; an update sends back what it read, so a field tidal does not
// know is kept only by writes that go through the status subresource or by
// patches (see client).
package knative
