// Package gathered reads metrics back from a Prometheus registry in tests:
// the sum of a metric's series, picked by a label value, as the services'
// tests check their counters and gauges.
package gathered

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sum gathers g and sums the counter and gauge values of metric name's
// series that carry a label whose value is value; every series of name when
// value is empty. A metric g has not registered, or with no such series,
// sums to 0.
func Sum(t testing.TB, g prometheus.Gatherer, name, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather %s: %v", name, err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := value == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
