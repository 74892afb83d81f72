package targets

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	"github.com/tidalscale/tidal/collector/scrape"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Annotation prefixes passed to the decider.
const (
	kpaPrefix = kpaconfig.Prefix
	lagPrefix = lagconfig.AnnotationPrefix
)

// Annotations on a Metric (copied there from its PodAutoscaler) that say how
// to read pods that have no queue-proxy.
const (
	// AnnotationFormat is "queue-proxy" (the default: Knative's protobuf
	// Stat) or "prometheus" (one series of the Prometheus text format).
	AnnotationFormat = "collector.tidal.dev/format"
	// AnnotationMetricName is the series name for the prometheus format.
	AnnotationMetricName = "collector.tidal.dev/metric-name"
	// AnnotationMetricType is "gauge" (read as it is, the default) or
	// "counter" (its rate per second is the measurement).
	AnnotationMetricType = "collector.tidal.dev/metric-type"
)

// targetRef names the workload a PodAutoscaler scales: the key deciders and
// the actuator know the target by.
func targetRef(pa *autoscalingv1alpha1.PodAutoscaler) *commonv1.TargetRef {
	r := pa.Spec.ScaleTargetRef
	return &commonv1.TargetRef{Namespace: pa.Namespace, Name: r.Name, ApiVersion: r.APIVersion, Kind: r.Kind}
}

// kpaSpec is the decider's spec of a KPA PodAutoscaler (kpaTargetSpec),
// with its metric.
func kpaSpec(pa *autoscalingv1alpha1.PodAutoscaler) *deciderv1.TargetSpec {
	s := kpaTargetSpec(targetRef(pa), pa.Annotations, int32(pa.Spec.ContainerConcurrency), string(pa.Spec.Reachability), pa.Status.LastDecision)
	if pa.Spec.Metric != "" {
		s.Annotations[kpaPrefix+"metric"] = string(pa.Spec.Metric)
	}
	return s
}

// kpaTargetSpec is the decider's spec of a KPA target, tidal's or Knative's
// PodAutoscaler (whose reachability values are the same): the Knative
// annotations of ann verbatim and its keep-alive one, container
// concurrency, reachability, and the keep-alive memory of its last decision.
func kpaTargetSpec(ref *commonv1.TargetRef, ann map[string]string, cc int32, reachability string, last *autoscalingv1alpha1.PodAutoscalerDecision) *deciderv1.TargetSpec {
	s := &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA, Annotations: prefixed(ann, kpaPrefix),
		ContainerConcurrency: cc, KeepAliveState: keepAliveState(last)}
	if ka, ok := ann[kpaconfig.AnnotationKeepAlive]; ok {
		s.Annotations[kpaconfig.AnnotationKeepAlive] = ka
	}
	switch autoscalingv1alpha1.Reachability(reachability) {
	case autoscalingv1alpha1.ReachabilityReachable:
		s.Reachability = deciderv1.Reachability_REACHABILITY_REACHABLE
	case autoscalingv1alpha1.ReachabilityUnreachable:
		s.Reachability = deciderv1.Reachability_REACHABILITY_UNREACHABLE
	}
	return s
}

// keepAliveState is the keep-alive memory recorded with a decision, for
// the decider to start from; "" when there is none or it is not what the
// decider accepts (it is status anyone with write access could set).
func keepAliveState(d *autoscalingv1alpha1.PodAutoscalerDecision) string {
	if d == nil || commonv1.ValidateKeepAliveState("keep_alive_state", d.KeepAliveState) != nil {
		return ""
	}
	return d.KeepAliveState
}

// prefixed copies the annotations with prefix, at most one more than the
// decider accepts (deciderv1.MaxAnnotations): enough for setSpec to refuse
// the spec, and an object with thousands of them costs no more.
func prefixed(ann map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		if len(out) > deciderv1.MaxAnnotations {
			break
		}
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// setSpec hands a target's spec to the sink once it passes the decider's
// own check (deciderv1): a spec the decider refuses would end this
// collector's stream to it, for every target on it. A refused spec's source
// lets go of its target, which is not measured until the object changes;
// false tells the caller to stop.
func (d *Discovery) setSpec(key string, spec *deciderv1.TargetSpec, retention time.Duration) bool {
	if err := spec.ValidateField("spec"); err != nil {
		if d.refused != nil {
			d.refused.Inc()
		}
		// The error quotes a bounded prefix of the bad value.
		d.log.Warn("target refused: its spec is beyond what the decider accepts", zap.String("object", key), zap.Error(err))
		d.release(key)
		return false
	}
	d.sink.SetSpec(spec, retention)
	return true
}

// configError is a target's error state for a configuration error: it
// quotes annotation values a user wrote and travels to the decider as
// measure_error, so it is bounded and printable.
func configError(err error) string {
	return commonv1.Printable(commonv1.Truncate("config: "+err.Error(), deciderv1.MaxMeasureError))
}

// RegisterMetrics registers the discovery's metrics with reg; call it
// before Start.
func (d *Discovery) RegisterMetrics(reg prometheus.Registerer) {
	d.refused = promauto.With(reg).NewCounter(prometheus.CounterOpts{
		Name: "tidal_collector_targets_refused_total",
		Help: "Targets not measured because their spec (scale target reference or annotations) is beyond what the decider accepts.",
	})
	reg.MustRegister(knPods{d}, d.knScrapes.vec)
}

// retention is the history a KPA target's decider needs: the stable window
// plus the scale-down delay, both as the actuator resolved them from the
// annotations and config-autoscaler into the Metric.
func retention(m *autoscalingv1alpha1.Metric) time.Duration {
	r := m.Spec.StableWindow.Duration
	if d := m.Spec.ScaleDownDelay; d != nil && d.Duration > 0 {
		r += d.Duration
	}
	return r
}

// format reads how to scrape a Metric's pods from its annotations.
func format(m *autoscalingv1alpha1.Metric, metric autoscalingv1alpha1.ScalingMetric) (scrape.Format, error) {
	var f scrape.Format
	switch v := m.Annotations[AnnotationFormat]; v {
	case "", "queue-proxy":
		return f, nil
	case "prometheus":
		f.Kind = scrape.FormatText
	default:
		return f, fmt.Errorf("annotation %s %q: want queue-proxy or prometheus", AnnotationFormat, v)
	}
	f.Metric = m.Annotations[AnnotationMetricName]
	if f.Metric == "" {
		return f, fmt.Errorf("annotation %s: required with %s=prometheus", AnnotationMetricName, AnnotationFormat)
	}
	switch v := m.Annotations[AnnotationMetricType]; v {
	case "", "gauge":
	case "counter":
		f.Counter = true
	default:
		return f, fmt.Errorf("annotation %s %q: want gauge or counter", AnnotationMetricType, v)
	}
	f.RPS = metric == autoscalingv1alpha1.MetricRPS || m.Annotations[kpaPrefix+"metric"] == "rps"
	return f, nil
}

// lagMode maps the CRD's lag mode to the decider's.
func lagMode(m string) string {
	if m == "keda" {
		return string(lagconfig.ModeKEDA)
	}
	return string(lagconfig.ModeRiffQueue)
}

// lagParams turns a lag source into the decider's lag.tidal.dev/* keys.
func lagParams(src *autoscalingv1alpha1.LagSource) map[string]string {
	p := map[string]string{}
	if src.Topic != "" {
		p["topic"] = src.Topic
	}
	if r := src.Riff; r != nil {
		if r.MaxReplicas != nil {
			p["maxReplicas"] = strconv.Itoa(int(*r.MaxReplicas))
		}
		if r.IdleTimeout != nil {
			p["idleTimeout"] = r.IdleTimeout.Duration.String()
		}
	}
	if k := src.KEDA; k != nil {
		if k.LagThreshold > 0 {
			p["lagThreshold"] = strconv.FormatInt(k.LagThreshold, 10)
		}
		if k.ActivationLagThreshold > 0 {
			p["activationLagThreshold"] = strconv.FormatInt(k.ActivationLagThreshold, 10)
		}
		if k.OffsetResetPolicy != "" {
			p["offsetResetPolicy"] = string(k.OffsetResetPolicy)
		}
		for key, v := range map[string]bool{
			"allowIdleConsumers":                 k.AllowIdleConsumers,
			"scaleToZeroOnInvalidOffset":         k.ScaleToZeroOnInvalidOffset,
			"excludePersistentLag":               k.ExcludePersistentLag,
			"limitToPartitionsWithLag":           k.LimitToPartitionsWithLag,
			"ensureEvenDistributionOfPartitions": k.EnsureEvenDistributionOfPartitions,
		} {
			if v {
				p[key] = "true"
			}
		}
		if len(k.PartitionLimitation) > 0 {
			parts := make([]string, len(k.PartitionLimitation))
			for i, n := range k.PartitionLimitation {
				parts[i] = strconv.Itoa(int(n))
			}
			p["partitionLimitation"] = strings.Join(parts, ",")
		}
	}
	return p
}

// lagSpec is the decider's spec of a lag target, and the interval at which
// its lag is read: the strategy's tick (riff 100 ms, KEDA pollingInterval).
// extra holds the object's own lag.tidal.dev/* annotations, which win.
func lagSpec(ref *commonv1.TargetRef, mode string, params, extra map[string]string) (*deciderv1.TargetSpec, time.Duration, error) {
	ann := map[string]string{lagPrefix + "mode": mode}
	plain := map[string]string{}
	for k, v := range params {
		ann[lagPrefix+k] = v
		plain[k] = v
	}
	for k, v := range extra {
		if len(ann) > deciderv1.MaxAnnotations {
			break // setSpec refuses the spec; copy no more
		}
		if name, ok := strings.CutPrefix(k, lagPrefix); ok {
			ann[k] = v
			if name == "mode" {
				mode = v
			} else {
				plain[name] = v
			}
		}
	}
	spec := &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_LAG, Annotations: ann}
	cfg, err := lagconfig.ParseConfig(mode, plain)
	if err != nil {
		return spec, 0, fmt.Errorf("lag parameters: %w", err)
	}
	return spec, cfg.TickInterval, nil
}

// functionRef names a Function's Deployment, which is named like it.
func functionRef(fn *functionsv1alpha1.Function) *commonv1.TargetRef {
	return &commonv1.TargetRef{Namespace: fn.Namespace, Name: fn.Name, ApiVersion: "apps/v1", Kind: "Deployment"}
}

// functionParams are a Function's riff parameters.
func functionParams(fn *functionsv1alpha1.Function) map[string]string {
	p := map[string]string{"topic": fn.Spec.Input}
	if fn.Spec.MaxReplicas != nil {
		p["maxReplicas"] = strconv.Itoa(int(*fn.Spec.MaxReplicas))
	}
	if fn.Spec.IdleTimeout != nil {
		p["idleTimeout"] = fn.Spec.IdleTimeout.Duration.String()
	}
	return p
}
