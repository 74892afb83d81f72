// Package knative tests tidal's collector against Knative Serving's own
// activator reporting code at knative.dev/serving v0.50.0: the activator's
// ConcurrencyReporter and ReportStats (wired by knactivator), sending over
// knative.dev/pkg's durable websocket connection to the collector's
// activator endpoint. It is a module of its own, so tidal's go.mod stays
// free of Knative's; serving/e2e runs Knative's real controller with tidal.
package knative
