package keda

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/kedavector"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// The scenario's timings: KEDA's pollingInterval and cooldownPeriod,
// shortened from the example's (30 s and KEDA's default 300 s) so that
// the run takes a minute or two; the HPA keeps kube-controller-manager's
// 15 s sync.
const (
	scenarioPolling  = 5
	scenarioCooldown = 15
)

// TestInlineKafkaThroughKEDA applies the README's inline Kafka example
// (type external, keda mode) as a user would, with its
// ClusterTriggerAuthentication the chart's, and lets KEDA's own operator
// and metrics server and kube-controller-manager's HPA scale the
// Deployment on a kfake topic: lag under activationLagThreshold leaves it
// at zero while KEDA polls; lag of N × lagThreshold takes it off zero
// (KEDA's operator) and to N (the HPA, reading external.metrics.k8s.io
// through the APIService from KEDA's metrics server, which asks the
// operator, which asks tidal); no lag takes it back to zero after
// cooldownPeriod (KEDA's operator).
func TestInlineKafkaThroughKEDA(t *testing.T) {
	kedaLog.follow(t)
	sc := newInlineScenario(t, nil)
	rec, broker, so, d := sc.rec, sc.broker, sc.so, sc.d
	c, ns, hpaName, threshold, n := sc.c, sc.ns, sc.hpaName, sc.threshold, sc.n

	// Under activation: KEDA polls (each poll is one OffsetFetch by tidal's
	// collector) and leaves the Deployment at zero.
	sc.setLag(sc.activation / sc.parts)
	polls := broker.Fetches(sc.group)
	testkit.Eventually(t, time.Minute, "three more polls of the group's offsets", func() bool { return broker.Fetches(sc.group) >= polls+3 })
	if got := rec.current(); got != 0 {
		t.Fatalf("lag under activationLagThreshold: %d replicas, want 0 (changes %v)", got, rec.changes())
	}
	if active := soCondition(t, d, so, kedav1alpha1.ConditionActive); active != metav1.ConditionFalse {
		t.Errorf("ScaledObject condition Active %s under activationLagThreshold, want False", active)
	}

	// N × lagThreshold: off zero, then the HPA's ceil(lag / lagThreshold).
	from := time.Now()
	sc.setLag(int64(n) * threshold / sc.parts)
	rec.waitFor(t, 2*time.Minute, fmt.Sprintf("%d replicas", n), n)
	t.Logf("0 → %d replicas in %s; changes %v", n, time.Since(from).Round(time.Millisecond), rec.changes())
	hpa := waitHPA(t, c, ns, hpaName, n, int64(n)*threshold)
	metric := hpa.Spec.Metrics[0].External.Metric.Name
	if ev := rescaleEvent(t, c, ns, hpaName, n); ev == "" {
		t.Errorf("no SuccessfulRescale event of HPA %s to %d", hpaName, n)
	} else {
		t.Logf("HPA %s: %s", hpaName, ev)
	}
	if v, want := externalMetric(t, c, ns, metric, so.Name), int64(n)*threshold*1000; v != want {
		t.Errorf("external.metrics.k8s.io %s: %dm, want %dm (the lag)", metric, v, want)
	}

	// No lag: back to zero after cooldownPeriod.
	from = time.Now()
	sc.setLag(0)
	rec.waitFor(t, 2*time.Minute, "0 replicas", 0)
	took := time.Since(from)
	t.Logf("%d → 0 replicas in %s (cooldownPeriod %d s)", n, took.Round(time.Millisecond), scenarioCooldown)
	// KEDA counts cooldownPeriod from its last active poll, at most one
	// pollingInterval before the lag went.
	if took < (scenarioCooldown-scenarioPolling)*time.Second {
		t.Errorf("back to zero %s after the lag went, before cooldownPeriod %d s less pollingInterval %d s", took, scenarioCooldown, scenarioPolling)
	}
	want := []int32{0, 1, n, 0}
	if got := rec.values(); !slices.Equal(got, want) {
		t.Errorf("replicas went %v, want %v (changes %v)", got, want, rec.changes())
	}
}

// TestInlineKafkaFallback applies the inline Kafka example with KEDA's
// fallback (failureThreshold 3, replicas 6) and an HPA behavior without
// scale-down stabilization, as a user sets them in the ScaledObject, and
// runs it at N replicas on the lag. When tidal cannot measure the lag (the
// broker refuses the group's offsets), tidal answers GetMetrics with an
// error, never a number: KEDA counts the failures and, past
// failureThreshold, its metrics server answers with the fallback, on which
// the HPA sets the fallback's replicas and the ScaledObject reports
// Fallback; once the broker answers, the HPA returns to N (at once, by the
// behavior) and Fallback clears. When tidal's collector itself is
// unreachable, KEDA's fallback cannot engage (KEDA v2.21.0 asks the
// external scaler for the metric spec on every metrics request, and gets
// none): the HPA fails to read the metric and keeps the Deployment as it
// is, and KEDA does not take it to zero; once the collector is back, on
// its address, scaling resumes and no lag takes it to zero.
func TestInlineKafkaFallback(t *testing.T) {
	kedaLog.follow(t)
	const fallbackReplicas, failures = 6, 3
	sc := newInlineScenario(t, func(so *kedav1alpha1.ScaledObject) {
		so.Spec.Fallback = &kedav1alpha1.Fallback{FailureThreshold: failures, Replicas: fallbackReplicas}
		so.Spec.Advanced = &kedav1alpha1.AdvancedConfig{HorizontalPodAutoscalerConfig: &kedav1alpha1.HorizontalPodAutoscalerConfig{
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptrTo(int32(0))},
			},
		}}
	})
	n := sc.n
	sc.setLag(int64(n) * sc.threshold / sc.parts)
	sc.rec.waitFor(t, 2*time.Minute, fmt.Sprintf("%d replicas on the lag", n), n)

	// The lag cannot be measured: KEDA's fallback.
	failAt := time.Now()
	sc.broker.Fail(true)
	t.Logf("the broker refuses the group's offsets")
	sc.rec.waitFor(t, 3*time.Minute, fmt.Sprintf("the fallback's %d replicas", fallbackReplicas), fallbackReplicas)
	t.Logf("%d → %d (fallback) %s after the lag could no longer be measured", n, fallbackReplicas, time.Since(failAt).Round(time.Millisecond))
	if got := soCondition(t, sc.d, sc.so, kedav1alpha1.ConditionFallback); got != metav1.ConditionTrue {
		t.Errorf("ScaledObject condition Fallback %s at the fallback's replicas, want True", got)
	}
	okAt := time.Now()
	sc.broker.Fail(false)
	sc.rec.waitFor(t, 2*time.Minute, fmt.Sprintf("back to %d replicas on tidal's answers", n), n)
	t.Logf("%d → %d %s after the broker answered again", fallbackReplicas, n, time.Since(okAt).Round(time.Millisecond))
	testkit.Eventually(t, time.Minute, "the ScaledObject's Fallback condition to clear", func() bool {
		return soCondition(t, sc.d, sc.so, kedav1alpha1.ConditionFallback) == metav1.ConditionFalse
	})

	// tidal unreachable: the HPA cannot read the metric and holds.
	coll := sc.sys.Collectors[0]
	if err := coll.Stop(10 * time.Second); err != nil {
		t.Logf("collector stop: %v", err)
	}
	downAt := time.Now()
	t.Logf("tidal's collector stopped")
	var cond string
	testkit.Eventually(t, 2*time.Minute, "the HPA to report that it cannot read the metric", func() bool {
		h, err := sc.c.Client.AutoscalingV2().HorizontalPodAutoscalers(sc.ns).Get(context.Background(), sc.hpaName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range h.Status.Conditions {
			if c.Type == autoscalingv2.ScalingActive {
				cond = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				return c.Status == "False" && c.LastTransitionTime.After(downAt)
			}
		}
		return false
	}, func() string { return "ScalingActive " + cond })
	t.Logf("HPA %s: ScalingActive %s", sc.hpaName, cond)
	// More failed reads than failureThreshold, so that a fallback that
	// could engage would have.
	testkit.Eventually(t, 2*time.Minute, fmt.Sprintf("%d failed reads of the metric by the HPA with tidal down", failures+1), func() bool {
		return failedMetricReads(t, sc, downAt) > failures
	})
	if got := sc.rec.current(); got != n {
		t.Errorf("with tidal unreachable the Deployment went to %d, want it held at %d (changes %v)", got, n, sc.rec.changes())
	}
	if got := soCondition(t, sc.d, sc.so, kedav1alpha1.ConditionFallback); got == metav1.ConditionTrue {
		t.Errorf("ScaledObject condition Fallback True with tidal unreachable: KEDA found a way to fall back; update the test and docs/keda.md")
	}

	// tidal back, no lag: to zero after cooldownPeriod.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := coll.Start(ctx, 30*time.Second); err != nil {
		t.Fatalf("restart the collector: %v", err)
	}
	t.Logf("tidal's collector back on %s", coll.GRPCAddr)
	sc.setLag(0)
	sc.rec.waitFor(t, 2*time.Minute, "0 replicas once tidal is back and the lag gone", 0)
	if got, want := sc.rec.values(), []int32{0, 1, n, fallbackReplicas, n, 0}; !slices.Equal(got, want) {
		t.Errorf("replicas went %v, want %v (changes %v)", got, want, sc.rec.changes())
	}
}

// TestInlineKafkaIdleMinBehavior applies the inline Kafka example with
// idleReplicaCount 0, minReplicaCount 2 and an HPA behavior that adds at
// most one pod per 15 s, as a user sets them: with no lag the Deployment
// stays at its idle 0; a lag of one lagThreshold (the HPA's 1) takes it to
// minReplicaCount (KEDA), which the HPA keeps; a lag of 4 × lagThreshold
// takes it to 4 one pod at a time (the HPA, by the behavior); no lag takes
// it back to idle 0 after cooldownPeriod (KEDA), past the HPA's floor of 2.
func TestInlineKafkaIdleMinBehavior(t *testing.T) {
	kedaLog.follow(t)
	const minReplicas = 2
	sc := newInlineScenario(t, func(so *kedav1alpha1.ScaledObject) {
		so.Spec.IdleReplicaCount = ptrTo(int32(0))
		so.Spec.MinReplicaCount = ptrTo(int32(minReplicas))
		so.Spec.Advanced = &kedav1alpha1.AdvancedConfig{HorizontalPodAutoscalerConfig: &kedav1alpha1.HorizontalPodAutoscalerConfig{
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{
					StabilizationWindowSeconds: ptrTo(int32(0)),
					Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 15}},
				},
			},
		}}
	})
	n := sc.n
	hpa, err := sc.c.Client.AutoscalingV2().HorizontalPodAutoscalers(sc.ns).Get(context.Background(), sc.hpaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != minReplicas {
		t.Errorf("HPA minReplicas %v, want minReplicaCount %d", hpa.Spec.MinReplicas, minReplicas)
	}

	// Idle: KEDA polls and leaves it at 0.
	polls := sc.broker.Fetches(sc.group)
	testkit.Eventually(t, time.Minute, "three polls of the group's offsets", func() bool { return sc.broker.Fetches(sc.group) >= polls+3 })
	if got := sc.rec.current(); got != 0 {
		t.Fatalf("idle: %d replicas, want idleReplicaCount 0 (changes %v)", got, sc.rec.changes())
	}

	// About one lagThreshold: active, at minReplicaCount, which the HPA
	// keeps.
	perPart := sc.threshold / sc.parts
	sc.setLag(perPart)
	sc.rec.waitFor(t, time.Minute, fmt.Sprintf("minReplicaCount %d", minReplicas), minReplicas)
	waitHPA(t, sc.c, sc.ns, sc.hpaName, minReplicas, perPart*sc.parts)

	// 4 × lagThreshold: one pod per 15 s.
	sc.setLag(int64(n) * sc.threshold / sc.parts)
	sc.rec.waitFor(t, 2*time.Minute, fmt.Sprintf("%d replicas", n), n)
	ch := sc.rec.changes()
	for i := 1; i < len(ch); i++ {
		if step := ch[i].replicas - ch[i-1].replicas; ch[i-1].replicas >= minReplicas && step > 1 {
			t.Errorf("the HPA added %d pods at once (%v), past the behavior's one per 15 s", step, ch)
		}
	}
	t.Logf("up to %d: %v", n, ch)

	// No lag: KEDA takes it to idle 0 after cooldownPeriod, below the HPA's
	// minReplicas.
	from := time.Now()
	sc.setLag(0)
	sc.rec.waitFor(t, 2*time.Minute, "idleReplicaCount 0", 0)
	t.Logf("%d → 0 (idle) %s after the lag went", n, time.Since(from).Round(time.Millisecond))
	if got, want := sc.rec.values(), []int32{0, minReplicas, 3, n, 0}; !slices.Equal(got, want) {
		t.Errorf("replicas went %v, want %v (changes %v)", got, want, sc.rec.changes())
	}
}

// failedMetricReads is how many times since since the HPA controller
// failed to read sc's metric (its FailedGetExternalMetric events).
func failedMetricReads(t *testing.T, sc *inlineScenario, since time.Time) int32 {
	t.Helper()
	evs, err := sc.c.Client.CoreV1().Events(sc.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "HorizontalPodAutoscaler", "involvedObject.name": sc.hpaName,
			"reason": "FailedGetExternalMetric"}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, ev := range evs.Items {
		if !ev.FirstTimestamp.Time.Before(since.Truncate(time.Second)) {
			n += max(ev.Count, 1)
		}
	}
	return n
}

// inlineScenario is the inline Kafka example applied in a namespace of
// its own against tidal and KEDA's operator, metrics server and the HPA: a
// kfake topic of parts partitions with the example's group, the
// example's Deployment at zero, and the ScaledObject Ready.
type inlineScenario struct {
	c                     *cluster.Cluster
	sys                   *system.System
	d                     *deployment
	ns, group, hpaName    string
	threshold, activation int64
	// parts is the topic's partitions, so that KEDA's cap (no more
	// replicas than partitions, without allowIdleConsumers) allows n.
	parts  int64
	n      int32
	broker *kedavector.Broker
	end    int64
	rec    *replicaLog
	so     *kedav1alpha1.ScaledObject
	t      *testing.T
}

// newInlineScenario sets the scenario up; edit, when given, changes the
// ScaledObject after the test's own changes (pollingInterval,
// cooldownPeriod).
func newInlineScenario(t *testing.T, edit func(*kedav1alpha1.ScaledObject)) *inlineScenario {
	t.Helper()
	return newInlineScenarioWith(t, inlineSetup{edit: edit})
}

// inlineSetup is what a scenario changes in newInlineScenario's set-up:
// edit the ScaledObject; broker, when given, starts the kfake broker;
// target changes the Deployment before it is created; beforeSO runs just
// before the ScaledObject is created; notReady skips the
// wait for the ScaledObject's Ready (hpaName stays "").
type inlineSetup struct {
	edit     func(*kedav1alpha1.ScaledObject)
	broker   func(topic string, parts int32, group string) (*kedavector.Broker, error)
	target   func(*appsv1.Deployment)
	beforeSO func(*inlineScenario)
	notReady bool
}

func newInlineScenarioWith(t *testing.T, setup inlineSetup) *inlineScenario {
	t.Helper()
	edit := setup.edit
	ex := loadExamples(t)
	found := ex.find("bootstrapServers", "external")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject with an inline Kafka trigger (bootstrapServers, type external) in %s", *examplesDir)
	}
	e := found[0]
	md := e.trigger().Metadata
	sc := &inlineScenario{t: t, group: md["consumerGroup"], parts: 4, n: 4}
	var err error
	if sc.threshold, err = strconv.ParseInt(md["lagThreshold"], 10, 64); err != nil || sc.threshold <= 0 {
		t.Fatalf("%s: lagThreshold %q", e, md["lagThreshold"])
	}
	sc.activation, err = strconv.ParseInt(md["activationLagThreshold"], 10, 64)
	if err != nil || sc.activation < sc.parts {
		t.Fatalf("%s: activationLagThreshold %q; the test needs one of %d or more to stay under it on every partition", e, md["activationLagThreshold"], sc.parts)
	}
	sc.c = cluster.Shared(t)
	installKEDACRDs(t, sc.c)
	tc := newCerts(t)
	sc.sys = startTidal(t, sc.c, tc, false)
	startKEDA(t, sc.c)
	sc.ns = sc.c.Namespace(t)
	sc.d = &deployment{c: sc.c, kube: kubeClient(t, sc.c), ns: sc.ns, scalerAddr: sc.sys.Collectors[0].GRPCAddr, certs: tc}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	newBroker := kedavector.NewTopicBroker
	if setup.broker != nil {
		newBroker = setup.broker
	}
	if sc.broker, err = newBroker(md["topic"], int32(sc.parts), sc.group); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.broker.Close)
	sc.setLag(0)

	target := e.so.Spec.ScaleTargetRef.Name
	dep := cluster.Deployment(target, nil, 0)
	if setup.target != nil {
		setup.target(dep)
	}
	if _, err := sc.c.Client.AppsV1().Deployments(sc.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc.rec = recordReplicas(ctx, t, sc.c, sc.ns, target)
	if setup.beforeSO != nil {
		setup.beforeSO(sc)
	}
	sc.so = sc.d.create(t, ex, e, e.so.Name, map[string]string{"bootstrapServers": strings.Join(sc.broker.Addrs(), ",")},
		func(so *kedav1alpha1.ScaledObject) {
			so.Spec.PollingInterval = ptrTo(int32(scenarioPolling))
			so.Spec.CooldownPeriod = ptrTo(int32(scenarioCooldown))
			if edit != nil {
				edit(so)
			}
		})
	if !setup.notReady {
		sc.hpaName = waitReady(t, sc.d, sc.so)
	}
	return sc
}

// setLag writes more records to every partition and commits the group
// lagPerPart behind the end.
func (sc *inlineScenario) setLag(lagPerPart int64) {
	sc.t.Helper()
	sc.end += lagPerPart + 10
	ps := make([]lag.Partition, sc.parts)
	for i := range ps {
		ps[i] = lag.Partition{ID: int32(i), End: sc.end, Committed: sc.end - lagPerPart, HasCommitted: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sc.broker.Set(ctx, ps); err != nil {
		sc.t.Fatal(err)
	}
	sc.t.Logf("lag %d on each of %d partitions (total %d)", lagPerPart, sc.parts, lagPerPart*sc.parts)
}

func ptrTo[T any](v T) *T { return &v }

// waitReady waits until KEDA's operator reports so Ready (its scaler built,
// tidal answering) and has made its HPA, and returns the HPA's name.
func waitReady(t *testing.T, d *deployment, so *kedav1alpha1.ScaledObject) string {
	t.Helper()
	var got kedav1alpha1.ScaledObject
	testkit.Eventually(t, time.Minute, "KEDA's operator reporting ScaledObject "+so.Name+" Ready with its HPA", func() bool {
		if err := d.kube.Get(context.Background(), keyOf(so), &got); err != nil {
			return false
		}
		ready := got.Status.Conditions.GetReadyCondition()
		return ready.IsTrue() && got.Status.HpaName != ""
	}, func() string { return fmt.Sprintf("status %+v", got.Status) })
	return got.Status.HpaName
}

func keyOf(so *kedav1alpha1.ScaledObject) client.ObjectKey {
	return client.ObjectKey{Namespace: so.Namespace, Name: so.Name}
}

// soCondition is the status of so's condition typ, as KEDA's operator set it.
func soCondition(t *testing.T, d *deployment, so *kedav1alpha1.ScaledObject, typ kedav1alpha1.ConditionType) metav1.ConditionStatus {
	t.Helper()
	var got kedav1alpha1.ScaledObject
	if err := d.kube.Get(context.Background(), keyOf(so), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return metav1.ConditionUnknown
}

// waitHPA waits until the HPA has read the metric at replicas (its current
// metric the lag averaged over them) and returns it.
func waitHPA(t *testing.T, c *cluster.Cluster, ns, name string, replicas int32, lagTotal int64) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	wantAvg := lagTotal * 1000 / int64(replicas)
	testkit.Eventually(t, time.Minute, fmt.Sprintf("HPA %s reading the lag at %d replicas (average %dm)", name, replicas, wantAvg), func() bool {
		h, err := c.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		hpa = h
		if h.Status.CurrentReplicas != replicas || h.Status.DesiredReplicas != replicas || len(h.Status.CurrentMetrics) != 1 {
			return false
		}
		ext := h.Status.CurrentMetrics[0].External
		return ext != nil && ext.Current.AverageValue != nil && ext.Current.AverageValue.MilliValue() == wantAvg
	}, func() string { return fmt.Sprintf("HPA %+v", hpa) })
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].External == nil {
		t.Fatalf("HPA %s metrics %+v; want one External metric", name, hpa.Spec.Metrics)
	}
	return hpa
}

// rescaleEvent is the message of the HPA controller's SuccessfulRescale
// event for name to size, or "" if none came within 15 s: the controller's
// event broadcaster sends it after the scale write, so a caller that saw
// the replicas may ask before it is stored.
func rescaleEvent(t *testing.T, c *cluster.Cluster, ns, name string, size int32) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "HorizontalPodAutoscaler", "involvedObject.name": name}.String()})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "SuccessfulRescale" && strings.Contains(ev.Message, fmt.Sprintf("New size: %d;", size)) {
				found = ev.Source.Component + ": " + ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatalf("events of HPA %s: %v", name, err)
	}
	return found
}

// externalMetric reads metric for ScaledObject so from the external
// metrics API, as the HPA does, in milli-units.
func externalMetric(t *testing.T, c *cluster.Cluster, ns, metric, so string) int64 {
	t.Helper()
	var list struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	}
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", ns, metric).
		Param("labelSelector", "scaledobject.keda.sh/name="+so).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("external.metrics.k8s.io %s: %v", metric, err)
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("external.metrics.k8s.io %s: %s (%v); want one value", metric, raw, err)
	}
	q, err := resource.ParseQuantity(list.Items[0].Value)
	if err != nil {
		t.Fatalf("external.metrics.k8s.io %s: value %q: %v", metric, list.Items[0].Value, err)
	}
	return q.MilliValue()
}

// replicaLog records every change of a Deployment's spec.replicas, from a
// watch that a goroutine of its own follows until the test ends.
type replicaLog struct {
	mu   sync.Mutex
	seen []replicaChange
}

type replicaChange struct {
	at       time.Time
	replicas int32
}

func (r replicaChange) String() string {
	return fmt.Sprintf("%d@%s", r.replicas, r.at.Format("15:04:05.000"))
}

func recordReplicas(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *replicaLog {
	t.Helper()
	r := &replicaLog{}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.Client.AppsV1().Deployments(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.Client.AppsV1().Deployments(ns).Watch(ctx, o)
		},
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	synced := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = watchtools.UntilWithSync(wctx, lw, &appsv1.Deployment{}, func(store cache.Store) (bool, error) {
			close(synced)
			return false, nil
		}, func(ev watch.Event) (bool, error) {
			if dep, ok := ev.Object.(*appsv1.Deployment); ok && dep.Spec.Replicas != nil {
				r.observe(*dep.Spec.Replicas)
			}
			return false, nil
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatalf("watch of Deployment %s/%s did not sync", ns, name)
	}
	return r
}

func (r *replicaLog) observe(n int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) > 0 && r.seen[len(r.seen)-1].replicas == n {
		return
	}
	if len(r.seen) < maxEvents {
		r.seen = append(r.seen, replicaChange{at: time.Now(), replicas: n})
	}
}

func (r *replicaLog) changes() []replicaChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]replicaChange(nil), r.seen...)
}

func (r *replicaLog) values() []int32 {
	var out []int32
	for _, c := range r.changes() {
		out = append(out, c.replicas)
	}
	return out
}

func (r *replicaLog) current() int32 {
	ch := r.changes()
	if len(ch) == 0 {
		return -1
	}
	return ch[len(ch)-1].replicas
}

func (r *replicaLog) waitFor(t *testing.T, within time.Duration, what string, n int32) {
	t.Helper()
	testkit.Eventually(t, within, what, func() bool { return r.current() == n },
		func() string { return fmt.Sprintf("changes %v", r.changes()) })
}

// pushPolling is TestInlineKafkaPushThroughKEDA's pollingInterval: long
// enough that KEDA's polls cannot be what takes the Deployment off zero.
const pushPolling = 120

// TestInlineKafkaPushThroughKEDA applies the inline Kafka example as
// external-push (keda mode) with a pollingInterval of two minutes: KEDA's
// operator holds tidal's StreamIsActive open, and when the lag passes
// activationLagThreshold tidal pushes the activity (its stream reads the
// offsets every --keda-stream-poll-interval, 5 s) and KEDA takes the
// Deployment off zero long before its next poll; the HPA then follows the
// lag as with type external.
func TestInlineKafkaPushThroughKEDA(t *testing.T) {
	kedaLog.follow(t)
	sc := newInlineScenario(t, func(so *kedav1alpha1.ScaledObject) {
		so.Spec.PollingInterval = ptrTo(int32(pushPolling))
		so.Spec.Triggers[0].Type = "external-push"
	})
	rec, n := sc.rec, sc.n
	from := time.Now()
	sc.setLag(int64(n) * sc.threshold / sc.parts)
	testkit.Eventually(t, pushPolling*time.Second/3, "the Deployment off zero on tidal's push", func() bool { return rec.current() > 0 },
		func() string { return fmt.Sprintf("changes %v", rec.changes()) })
	t.Logf("0 → %d replicas %s after the lag, pollingInterval %d s; changes %v", rec.current(), time.Since(from).Round(time.Millisecond), pushPolling, rec.changes())
	rec.waitFor(t, 2*time.Minute, fmt.Sprintf("%d replicas (the HPA)", n), n)
}
