// Package targets finds what the collector measures, through informers and
// never by polling: a Metric (one per PodAutoscaler, written by the
// actuator's reconciler as Knative's KPA reconciler writes its Metric) with
// its PodAutoscaler gives a KPA target scraped from its pods, or a lag target
// when it carries a lag source; a Function gives a riff lag target on its
// input topic; with Knative mode on (UseKnative), a Knative Serving
// PodAutoscaler of a measured class gives a KPA target scraped from its
// Revision's pods. Pods come from the Pods API, filtered by the target's
// selector: Running, Ready, not deleting, with an IP. (EndpointSlices cannot
// carry the loopback pod IPs of the test cluster, and the Pods API works the
// same on real clusters.) The pod cache keeps trimmed pods indexed by label
// (package pods), so a pod event reaches only the targets whose selectors
// match it, and a target lists only the pods that carry its selector's
// label.
package targets
