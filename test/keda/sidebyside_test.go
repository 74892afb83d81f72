package keda

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// sideBySideSteps are the lag steps, per partition of the 4: under
// activationLagThreshold, then 4, 2 and 3 times lagThreshold in total, then
// none.
var sideBySideSteps = []int64{1, 50, 25, 37, 0}

// TestKafkaSideBySide runs KEDA's own Kafka scaler (type kafka, in KEDA's
// operator) and tidal's inline trigger (the README's inline Kafka example,
// keda mode) on the same topic, group and lag in the same run, each
// ScaledObject scaling a Deployment of its own through KEDA's operator,
// metrics server and the HPA (no scale-down stabilization, so each step
// shows within an HPA sync): at every lag step both Deployments reach the
// same replica count, and the external metrics API answers both the same
// value. The table it logs is the one in BENCHMARKS.md.
func TestKafkaSideBySide(t *testing.T) {
	kedaLog.follow(t)
	behavior := func(so *kedav1alpha1.ScaledObject) {
		so.Spec.Advanced = &kedav1alpha1.AdvancedConfig{HorizontalPodAutoscalerConfig: &kedav1alpha1.HorizontalPodAutoscalerConfig{
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptrTo(int32(0))},
			},
		}}
	}
	sc := newInlineScenario(t, behavior)
	ctx := context.Background()

	// KEDA's kafka trigger: the example's keys but tidal's own (how KEDA
	// reaches tidal, and lag.tidal.dev/*), on a Deployment of its own.
	kafkaDep := sc.so.Spec.ScaleTargetRef.Name + "-kafka"
	if _, err := sc.c.Client.AppsV1().Deployments(sc.ns).Create(ctx, cluster.Deployment(kafkaDep, nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kafkaRec := recordReplicas(ctx, t, sc.c, sc.ns, kafkaDep)
	so := &kedav1alpha1.ScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: sc.so.Name + "-kafka", Namespace: sc.ns},
		Spec:       *sc.so.Spec.DeepCopy(),
	}
	so.Spec.ScaleTargetRef.Name = kafkaDep
	tr := &so.Spec.Triggers[0]
	tr.Type, tr.AuthenticationRef = "kafka", nil
	for k := range tr.Metadata {
		if k == "scalerAddress" || k == "enableTLS" || strings.HasPrefix(k, "lag.tidal.dev/") {
			delete(tr.Metadata, k)
		}
	}
	if err := sc.d.kube.Create(ctx, so); err != nil {
		t.Fatalf("ScaledObject %s (type kafka): %v", so.Name, err)
	}
	sc.d.deleteAtEnd(t, so)
	kafkaHPA := waitReady(t, sc.d, so)
	t.Logf("KEDA's kafka trigger: %v", tr.Metadata)

	type row struct {
		lag                int64
		kafka, tidal, want int32
		kafkaAt, tidalAt   time.Duration
		metric             string
	}
	var rows []row
	for _, perPart := range sideBySideSteps {
		total := perPart * sc.parts
		want := kedaReplicas(total, sc.threshold, sc.activation, sc.parts)
		from := time.Now()
		polls := sc.broker.Fetches(sc.group)
		sc.setLag(perPart)
		var kafkaAt, tidalAt time.Duration
		testkit.Eventually(t, 2*time.Minute, fmt.Sprintf("both Deployments at %d replicas on a lag of %d", want, total), func() bool {
			if kafkaAt == 0 && kafkaRec.current() == want {
				kafkaAt = time.Since(from)
			}
			if tidalAt == 0 && sc.rec.current() == want {
				tidalAt = time.Since(from)
			}
			// A step that keeps the count is reached once both sides have
			// polled the new lag a few times.
			return kafkaRec.current() == want && sc.rec.current() == want && sc.broker.Fetches(sc.group) >= polls+6
		}, func() string {
			return fmt.Sprintf("KEDA's kafka scaler: %v; tidal: %v", kafkaRec.changes(), sc.rec.changes())
		})
		r := row{lag: total, kafka: kafkaRec.current(), tidal: sc.rec.current(), want: want, kafkaAt: kafkaAt, tidalAt: tidalAt}
		if want > 0 {
			// The HPAs are on the step's count: the external metrics API
			// answers each ScaledObject's metric; both must read the lag.
			km := hpaMetric(t, sc.c, sc.ns, kafkaHPA)
			tm := hpaMetric(t, sc.c, sc.ns, sc.hpaName)
			kv, tv := externalMetric(t, sc.c, sc.ns, km, so.Name), externalMetric(t, sc.c, sc.ns, tm, sc.so.Name)
			r.metric = fmt.Sprintf("%dm / %dm", kv, tv)
			if kv != tv {
				t.Errorf("lag %d: KEDA's kafka scaler's metric %dm, tidal's %dm", total, kv, tv)
			}
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	b.WriteString("| lag (total, 4 partitions) | KEDA's kafka scaler | tidal (keda mode) | metric (kafka / tidal) | reached after (kafka / tidal) |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %s / %s |\n", r.lag, r.kafka, r.tidal, r.metric,
			r.kafkaAt.Round(100*time.Millisecond), r.tidalAt.Round(100*time.Millisecond))
	}
	t.Logf("side by side (lagThreshold %d, activationLagThreshold %d, pollingInterval %d s, cooldownPeriod %d s):\n%s",
		sc.threshold, sc.activation, scenarioPolling, scenarioCooldown, b.String())
	// Between steps the lag passes, for a few milliseconds, through what
	// the broker holds between setLag's writes and its commit: a poll or an
	// HPA sync landing there may add a change on one side, so the whole
	// sequences are logged, not compared.
	t.Logf("replica changes: KEDA's kafka scaler %v; tidal %v", kafkaRec.changes(), sc.rec.changes())
}

// kedaReplicas is where KEDA's Kafka semantics put a Deployment at rest on
// a total lag: 0 at or under activation (after cooldownPeriod), else the
// HPA's ceil(lag / threshold), capped at the partitions (no
// allowIdleConsumers) and at least 1.
func kedaReplicas(total, threshold, activation, parts int64) int32 {
	if total <= activation {
		return 0
	}
	return int32(max(1, min(parts, (total+threshold-1)/threshold)))
}

// hpaMetric is the name of the HPA's one external metric.
func hpaMetric(t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	h, err := c.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].External == nil {
		t.Fatalf("HPA %s metrics %+v; want one External metric", name, h.Spec.Metrics)
	}
	return h.Spec.Metrics[0].External.Metric.Name
}
