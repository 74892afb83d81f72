// Package activator serves the websocket protocol Knative's activators
// report to their autoscaler with (knative.dev/serving v0.50.0,
// cmd/activator/main.go and pkg/activator/stat_reporter.go): each activator
// dials ws://autoscaler.knative-serving.svc.CLUSTER-DOMAIN:8080, sends a
// binary frame of protobuf WireStatMessages every second (and one at once,
// concurrency 1, on a revision's first request), and pings; it counts itself
// Ready only while the connection holds.
//
// The package decodes those frames under bounds (frame size, messages per
// frame, names, numbers, a rate per connection, a number of connections),
// stamps each stat with its arrival second as Knative's autoscaler does,
// names its target (in Knative mode the revision's PodAutoscaler's scale
// target, ByPodAutoscaler; else Knative's naming rule for the revision's
// Deployment, RevisionDeployment), and routes it: to this collector's hub
// when this replica owns the target, else to the owning replica over ActivatorStatService, which
// records it at the first replica's stamp and never forwards again.
package activator
