package activator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Outcomes of a stat, the values of the stats counter's label.
const (
	outcomeRecorded       = "recorded"
	outcomeForwarded      = "forwarded"
	outcomeInvalid        = "invalid"
	outcomeNoStat         = "no-stat"
	outcomeUnresolved     = "unresolved"
	outcomeUnknown        = "unknown-target"
	outcomeTargetLimit    = "target-limit"
	outcomeNotOwner       = "not-owner"
	outcomeNoOwner        = "no-owner"
	outcomeBacklog        = "backlog"
	outcomeRateLimited    = "rate-limited"
	outcomeForwardDropped = "forward-dropped"
	outcomeForwardFailed  = "forward-failed"
)

// Reasons a connection or a frame is refused.
const (
	reasonConnLimit     = "connection-limit"
	reasonAddress       = "address"
	reasonUpgrade       = "upgrade"
	reasonTooBig        = "too-big"
	reasonNotBinary     = "not-binary"
	reasonMalformed     = "malformed"
	reasonTooManyInOne  = "too-many-messages"
	reasonRateLimitedFr = "rate-limited"
)

// Metrics are the endpoint's counters; one set per registry.
type Metrics struct {
	connections prometheus.Gauge
	refused     *prometheus.CounterVec
	frames      *prometheus.CounterVec
	stats       *prometheus.CounterVec
	// byPodAutoscaler and byNamingRule count how stats' targets were
	// named (ByPodAutoscaler).
	byPodAutoscaler, byNamingRule prometheus.Counter
}

// NewMetrics registers the endpoint's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		connections: f.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_activator_connections",
			Help: "Activator websocket connections held.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_activator_connections_refused_total",
			Help: "Activator connections refused, by reason: connection-limit, address (not in --activator-allowed-cidrs), upgrade (not a websocket handshake).",
		}, []string{"reason"}),
		frames: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_activator_frames_refused_total",
			Help: "Activator frames refused, by reason: too-big, not-binary, malformed, too-many-messages (each closes its connection), rate-limited (dropped).",
		}, []string{"reason"}),
		stats: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_activator_stats_total",
			Help: "Activator stats by outcome: recorded here, forwarded to the owning replica, or dropped (invalid, no-stat, unresolved, unknown-target, target-limit, not-owner, no-owner, backlog, rate-limited, forward-dropped, forward-failed).",
		}, []string{"outcome"}),
	}
	resolved := f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_collector_activator_resolved_total",
		Help: "Activator stats' targets in Knative mode, by how they were named: podautoscaler (the revision's PodAutoscaler's scaleTargetRef) or naming-rule (its PodAutoscaler not known yet: Knative's <revision>-deployment).",
	}, []string{"by"})
	m.byPodAutoscaler = resolved.WithLabelValues("podautoscaler")
	m.byNamingRule = resolved.WithLabelValues("naming-rule")
	for _, r := range []string{reasonConnLimit, reasonAddress, reasonUpgrade} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range []string{reasonTooBig, reasonNotBinary, reasonMalformed, reasonTooManyInOne, reasonRateLimitedFr} {
		m.frames.WithLabelValues(r)
	}
	for _, o := range []string{outcomeRecorded, outcomeForwarded, outcomeInvalid, outcomeNoStat, outcomeUnresolved, outcomeUnknown, outcomeTargetLimit,
		outcomeNotOwner, outcomeNoOwner, outcomeBacklog, outcomeRateLimited, outcomeForwardDropped, outcomeForwardFailed} {
		m.stats.WithLabelValues(o)
	}
	return m
}

func (m *Metrics) count(outcome string, n int) {
	if n > 0 {
		m.stats.WithLabelValues(outcome).Add(float64(n))
	}
}
