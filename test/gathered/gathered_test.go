package gathered

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	drops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drops_total"}, []string{"reason", "kind"})
	conns := prometheus.NewGauge(prometheus.GaugeOpts{Name: "connections"})
	reg.MustRegister(drops, conns)
	drops.WithLabelValues("rate", "stat").Add(3)
	drops.WithLabelValues("frame", "stat").Add(2)
	drops.WithLabelValues("rate", "frame").Add(1)
	conns.Set(4)
	tests := []struct {
		name, value string
		want        float64
	}{
		{"drops_total", "", 6},
		{"drops_total", "rate", 4},
		{"drops_total", "frame", 3}, // a label value of either label
		{"drops_total", "none", 0},
		{"connections", "", 4},
		{"absent", "", 0},
	}
	for _, tt := range tests {
		if got := Sum(t, reg, tt.name, tt.value); got != tt.want {
			t.Errorf("Sum(%s, %q) = %v, want %v", tt.name, tt.value, got, tt.want)
		}
	}
}
