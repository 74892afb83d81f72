package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the streams' Prometheus metrics.
type Metrics struct {
	targets   prometheus.Gauge
	depth     *prometheus.GaugeVec
	replays   *prometheus.CounterVec
	sent      *prometheus.CounterVec
	batches   *prometheus.CounterVec
	connected *prometheus.GaugeVec
	failures  *prometheus.CounterVec
	refused   prometheus.Counter
	expired   prometheus.Counter
}

// NewMetrics registers the streams' metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		targets: f.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_targets",
			Help: "Targets this collector measures and streams.",
		}),
		depth: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_collector_stream_queue_depth",
			Help: "Samples waiting to be sent to a decider.",
		}, []string{"decider"}),
		replays: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_stream_replays_total",
			Help: "Target histories replayed to a decider, by cause: connect (a new stream), move (the target's owner changed), overflow (the decider fell behind).",
		}, []string{"decider", "cause"}),
		sent: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_stream_samples_sent_total",
			Help: "Samples sent to a decider, replayed ones included.",
		}, []string{"decider"}),
		batches: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_stream_batches_sent_total",
			Help: "Ingest batches sent to a decider.",
		}, []string{"decider"}),
		connected: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_collector_stream_connected",
			Help: "1 while the stream to a decider is open.",
		}, []string{"decider"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_stream_failures_total",
			Help: "Decider streams that failed or could not be opened.",
		}, []string{"decider"}),
		refused: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_targets_over_limit_total",
			Help: "New targets refused because the collector held --max-targets.",
		}),
		expired: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_pushed_targets_expired_total",
			Help: "Targets created by pushed stats and forgotten after --pushed-target-ttl without a push.",
		}),
	}
}

// deleteDecider deletes every series labelled with a decider's address, so
// that series do not pile up as decider pods restart under new addresses.
func (m *Metrics) deleteDecider(addr string) {
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.depth, m.replays, m.sent, m.batches, m.connected, m.failures} {
		v.DeletePartialMatch(prometheus.Labels{"decider": addr})
	}
}
