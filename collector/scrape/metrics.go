package scrape

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the scraper's Prometheus metrics.
type Metrics struct {
	latency    prometheus.Histogram
	podLatency prometheus.Histogram
	failures   *prometheus.CounterVec
	pods       prometheus.Counter
	targets    prometheus.Gauge
	skipped    prometheus.Counter
	lostRounds prometheus.Counter
	dials      prometheus.Counter
	idleConns  prometheus.Gauge
}

// NewMetrics registers the scraper's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_collector_scrape_duration_seconds",
			Help:    "Time from the start of a target's scrape until its sample is recorded or the scrape fails.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		podLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_collector_pod_scrape_duration_seconds",
			Help:    "Time of one pod's metrics request, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_scrape_failures_total",
			Help: "Failed pod reads by reason; reason \"sample\" counts whole scrapes that recorded nothing.",
		}, []string{"reason"}),
		pods: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_pods_scraped_total",
			Help: "Pods read successfully; its rate is pods scraped per second.",
		}),
		targets: f.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_scrape_targets",
			Help: "Targets being scraped.",
		}),
		skipped: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_scrapes_skipped_total",
			Help: "Ticks skipped for a target because its previous scrape was still waiting on a pod.",
		}),
		lostRounds: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_scrape_rounds_lost_total",
			Help: "Rounds not run because the scraper fell more than three intervals behind: every target misses that second's sample, and a window with the gap inside reads low. A rate above 0 means too few --scrape.workers or too little CPU.",
		}),
		dials: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_scrape_dials_total",
			Help: "Connections opened to pods; beyond the pods' churn, a rate near the pods scraped means --scrape-max-idle-conns is too small.",
		}),
		idleConns: f.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_scrape_idle_connections",
			Help: "Pod connections kept alive between scrapes, at the last sweep.",
		}),
	}
	for _, r := range []string{ReasonTimeout, ReasonConnect, ReasonVanished, ReasonStatus, ReasonContentType, ReasonTooLarge, ReasonMalformed, ReasonBadValue, ReasonCounter, ReasonSample} {
		m.failures.WithLabelValues(r)
	}
	return m
}
