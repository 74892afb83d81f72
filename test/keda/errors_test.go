package keda

import (
	"context"
	"fmt"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/kedacore/keda/v2/pkg/scalers/scalersconfig"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/tidalscale/tidal/test/cluster"
)

// TestErrorContract changes one thing at a time in the README's follow
// example and checks what KEDA's own scaler gets back from tidal: bad or
// missing metadata (follow or inline Kafka) is INVALID_ARGUMENT naming the
// key, a PodAutoscaler that does not exist is NOT_FOUND, a metricType of
// Value (which KEDA does not send: tidal reads the ScaledObject) is
// INVALID_ARGUMENT naming the field. KEDA's
// GetMetricSpecForScaling turns every error into no spec, and
// GetMetricsAndActivity returns it as it came, with no value.
func TestErrorContract(t *testing.T) {
	kedaLog.follow(t)
	ex := loadExamples(t)
	found := ex.find("podAutoscaler", "external", "external-push")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject following a podAutoscaler in %s", *examplesDir)
	}
	e := found[0]
	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, false)
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}

	kafka := map[string]string{
		"podAutoscaler": "", "namespace": "",
		"bootstrapServers": "127.0.0.1:9092", "consumerGroup": "orders", "topic": "orders", "lagThreshold": "10",
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for i, cs := range []struct {
		name      string
		overrides map[string]string
		code      codes.Code
		// mention must appear in the status message: the key at fault.
		mention string
	}{
		{"no target", with(nil, "podAutoscaler", ""), codes.InvalidArgument, "podAutoscaler"},
		{"target not a name", with(nil, "podAutoscaler", "Web_1"), codes.InvalidArgument, "scalerMetadata.podAutoscaler"},
		{"namespace not a name", with(nil, "namespace", "Not A Namespace"), codes.InvalidArgument, "scalerMetadata.namespace"},
		{"misspelt key", with(nil, "podAutoscalr", "web"), codes.InvalidArgument, "podAutoscalr"},
		{"two targets", with(nil, "function", "fn"), codes.InvalidArgument, "scalerMetadata.function"},
		{"follow and inline Kafka", with(nil, "bootstrapServers", "127.0.0.1:9092"), codes.InvalidArgument, "scalerMetadata.bootstrapServers"},
		{"no such PodAutoscaler", with(nil, "podAutoscaler", "nobody-here"), codes.NotFound, "nobody-here"},
		{"inline Kafka without group", with(kafka, "consumerGroup", ""), codes.InvalidArgument, "scalerMetadata.consumerGroup"},
		{"inline Kafka bad broker", with(kafka, "bootstrapServers", "broker-without-port"), codes.InvalidArgument, "scalerMetadata.bootstrapServers"},
		{"inline Kafka bad threshold", with(kafka, "lagThreshold", "-5"), codes.InvalidArgument, "lagThreshold"},
		{"inline Kafka bad policy", with(kafka, "offsetResetPolicy", "newest"), codes.InvalidArgument, "offsetResetPolicy"},
	} {
		t.Run(cs.name, func(t *testing.T) {
			kedaLog.follow(t)
			refused(t, d.apply(t, ex, e, fmt.Sprintf("errors-%d", i), cs.overrides), cs.code, cs.mention)
		})
	}
	t.Run("metricType Value", func(t *testing.T) {
		kedaLog.follow(t)
		cfg := d.applyWith(t, ex, e, "errors-metrictype", nil, func(so *kedav1alpha1.ScaledObject) {
			so.Spec.Triggers[e.index].MetricType = autoscalingv2.ValueMetricType
		})
		refused(t, cfg, codes.InvalidArgument, fmt.Sprintf(`spec.triggers[%d].metricType "Value"`, e.index))
	})
}

// refused checks what KEDA's own scaler built from cfg gets back from
// tidal: no metric spec, and from GetMetricsAndActivity an error of code
// mentioning mention (the key at fault), with no value.
func refused(t *testing.T, cfg *scalersconfig.ScalerConfig, code codes.Code, mention string) {
	t.Helper()
	s := newScaler(t, cfg)
	ctx := context.Background()
	if specs := s.GetMetricSpecForScaling(ctx); len(specs) != 0 {
		t.Errorf("KEDA's GetMetricSpecForScaling: %+v; want no spec (tidal refused)", specs)
	}
	// KEDA asks for the metric GetMetricSpec named once; a trigger
	// refused now may have had one before (its PodAutoscaler since
	// deleted), under the name tidal gives a follow trigger.
	metric := scalers.GenerateMetricNameWithIndex(cfg.TriggerIndex,
		fmt.Sprintf("tidal-podautoscaler-%s-%s", cfg.ScalableObjectNamespace, cfg.TriggerMetadata["podAutoscaler"]))
	vals, active, err := s.GetMetricsAndActivity(ctx, metric)
	if err == nil {
		t.Fatalf("KEDA's GetMetricsAndActivity: %v, active %v; want %s", values(vals), active, code)
	}
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), mention) {
		t.Errorf("KEDA's GetMetricsAndActivity: %v; want %s mentioning %q", err, code, mention)
	}
	if len(vals) != 0 || active {
		t.Errorf("KEDA's GetMetricsAndActivity returned %v, active %v beside its error", values(vals), active)
	}
}
