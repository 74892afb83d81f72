// Package knmetrics exports the deciders' KPA decisions for Knative
// Revisions under the names, help, types and labels Knative Serving
// v0.50.0's autoscaler exports them (pkg/autoscaler/scaling/metrics.go,
// through OpenTelemetry's Prometheus exporter with knative.dev/pkg's
// UnderscoreEscapingWithSuffixes), so a Knative dashboard or alert built on
// kn_revision_* shows tidal's decisions: desired pods, excess burst
// capacity, panic mode, and the stable, panic and target values of the
// revision's metric (concurrency or requests per second).
package knmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// ScopeName is the instrumentation scope Knative's autoscaler records these
// under; its exporter puts it in the otel_scope_name label.
const ScopeName = "knative.dev/serving/pkg/autoscaler"

// labels are Knative's attributes (knative.dev/serving pkg/metrics:
// k8s.namespace.name, kn.configuration.name, kn.revision.name,
// kn.service.name, escaped) after the exporter's scope labels.
var labels = []string{"otel_scope_name", "otel_scope_version", "otel_scope_schema_url",
	"k8s_namespace_name", "kn_configuration_name", "kn_revision_name", "kn_service_name"}

func desc(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }

// Knative's names and descriptions; a revision's metric decides which of
// the concurrency and the rps families it has.
var (
	desiredPods    = desc("kn_revision_pods_desired", "Number of pods the autoscaler wants to allocate")
	excessCapacity = desc("kn_revision_capacity_excess", "Excess burst capacity observed over the stable window")
	panicMode      = desc("kn_revision_panic_mode", "If greater than 0 the autoscaler is in panic mode")

	concurrencyStable = desc("kn_revision_concurrency_stable", "Average of request count per observed pod over the stable window")
	concurrencyPanic  = desc("kn_revision_concurrency_panic", "Average of request count per observed pod over the panic window")
	concurrencyTarget = desc("kn_revision_concurrency_target", "The desired concurrent requests for each pod")

	rpsStable = desc("kn_revision_rps_stable_per_second", "Average of requests-per-second per observed pod over the stable window")
	rpsPanic  = desc("kn_revision_rps_panic_per_second", "Average of requests-per-second per observed pod over the panic window")
	rpsTarget = desc("kn_revision_rps_target_per_second", "The desired concurrent requests for each pod")
)

// Collector reads the engine's latest decisions at each scrape.
type Collector struct{ eng *engine.Engine }

// New returns a collector of eng's Knative Revisions.
func New(eng *engine.Engine) *Collector { return &Collector{eng: eng} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{desiredPods, excessCapacity, panicMode, concurrencyStable, concurrencyPanic,
		concurrencyTarget, rpsStable, rpsPanic, rpsTarget} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one series of each family per
// Knative Revision with a decision, as Knative records them at each tick
// (desired before the reconciler's bounds, the window averages, the target).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.eng.EachKnative(func(d engine.Decision, kr *engine.KnativeRevision) {
		if d.KPA == nil || d.KPA.At.IsZero() || d.Desired < 0 {
			return
		}
		lv := []string{ScopeName, "", "", d.Target.Namespace, kr.Configuration, kr.Revision, kr.Service}
		gauge := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
		}
		panicking := 0.0
		if d.Panicking {
			panicking = 1
		}
		gauge(desiredPods, float64(d.Desired))
		gauge(excessCapacity, float64(d.ExcessBurstCapacity))
		gauge(panicMode, panicking)
		stable, pnc, target := concurrencyStable, concurrencyPanic, concurrencyTarget
		if d.KPA.Metric == kpaspec.RPS {
			stable, pnc, target = rpsStable, rpsPanic, rpsTarget
		}
		gauge(stable, d.KPA.ObservedStable)
		gauge(pnc, d.KPA.ObservedPanic)
		gauge(target, d.KPA.TargetValue)
	})
}
