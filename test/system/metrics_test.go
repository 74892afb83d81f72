package system

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stats_total"}, []string{"outcome", "by"})
	conns := prometheus.NewGauge(prometheus.GaugeOpts{Name: "connections"})
	reg.MustRegister(stats, conns)
	stats.WithLabelValues("recorded", "a").Add(3)
	stats.WithLabelValues("recorded", "b").Add(4)
	stats.WithLabelValues("dropped", "a").Add(1)
	conns.Set(2)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	p := &Proc{Name: "svc", HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}
	tests := []struct {
		series string
		want   float64
		absent bool
	}{
		{series: "stats_total", want: 8},
		{series: `stats_total{by="b",outcome="recorded"}`, want: 4},
		{series: `stats_total{by="a",outcome="dropped"}`, want: 1},
		{series: `stats_total{outcome="recorded"}`, absent: true}, // a whole series, not a subset of its labels
		{series: "connections", want: 2},
		{series: "absent_total", absent: true},
	}
	for _, tt := range tests {
		got, err := p.Metric(tt.series)
		if tt.absent {
			if !errors.Is(err, ErrNoSeries) {
				t.Errorf("Metric(%s) = %v, %v; want ErrNoSeries", tt.series, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Metric(%s) = %v, %v; want %v", tt.series, got, err, tt.want)
		}
	}
}
