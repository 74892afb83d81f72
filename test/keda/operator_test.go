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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/kedavector"
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
	ex := loadExamples(t)
	found := ex.find("bootstrapServers", "external")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject with an inline Kafka trigger (bootstrapServers, type external) in %s", *examplesDir)
	}
	e := found[0]
	md := e.trigger().Metadata
	topic, group := md["topic"], md["consumerGroup"]
	threshold, err := strconv.ParseInt(md["lagThreshold"], 10, 64)
	if err != nil || threshold <= 0 {
		t.Fatalf("%s: lagThreshold %q", e, md["lagThreshold"])
	}
	activation, err := strconv.ParseInt(md["activationLagThreshold"], 10, 64)
	if err != nil || activation < 4 {
		t.Fatalf("%s: activationLagThreshold %q; the test needs one of 4 or more to stay under it on every partition", e, md["activationLagThreshold"])
	}
	// Four partitions, so that KEDA's cap (no more replicas than
	// partitions, without allowIdleConsumers) allows N = 4.
	const parts, n = 4, 4

	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, false)
	startKEDA(t, c)
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	broker, err := kedavector.NewTopicBroker(topic, parts, group)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	var end int64
	// setLag writes more records to every partition and commits the group
	// lagPerPart behind the end.
	setLag := func(lagPerPart int64) {
		t.Helper()
		end += lagPerPart + 10
		ps := make([]lag.Partition, parts)
		for i := range ps {
			ps[i] = lag.Partition{ID: int32(i), End: end, Committed: end - lagPerPart, HasCommitted: true}
		}
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := broker.Set(sctx, ps); err != nil {
			t.Fatal(err)
		}
		t.Logf("lag %d on each of %d partitions (total %d)", lagPerPart, parts, lagPerPart*parts)
	}
	setLag(0)

	target := e.so.Spec.ScaleTargetRef.Name
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment(target, nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := recordReplicas(ctx, t, c, ns, target)

	so := d.create(t, ex, e, e.so.Name, map[string]string{"bootstrapServers": strings.Join(broker.Addrs(), ",")},
		func(so *kedav1alpha1.ScaledObject) {
			so.Spec.PollingInterval = ptrTo(int32(scenarioPolling))
			so.Spec.CooldownPeriod = ptrTo(int32(scenarioCooldown))
		})
	hpaName := waitReady(t, d, so)

	// Under activation: KEDA polls (each poll is one OffsetFetch by tidal's
	// collector) and leaves the Deployment at zero.
	setLag(activation / parts)
	polls := broker.Fetches(group)
	testkit.Eventually(t, time.Minute, "three more polls of the group's offsets", func() bool { return broker.Fetches(group) >= polls+3 })
	if got := rec.current(); got != 0 {
		t.Fatalf("lag under activationLagThreshold: %d replicas, want 0 (changes %v)", got, rec.changes())
	}
	if active := soCondition(t, d, so, kedav1alpha1.ConditionActive); active != metav1.ConditionFalse {
		t.Errorf("ScaledObject condition Active %s under activationLagThreshold, want False", active)
	}

	// N × lagThreshold: off zero, then the HPA's ceil(lag / lagThreshold).
	from := time.Now()
	setLag(n * threshold / parts)
	rec.waitFor(t, 2*time.Minute, fmt.Sprintf("%d replicas", n), n)
	t.Logf("0 → %d replicas in %s; changes %v", n, time.Since(from).Round(time.Millisecond), rec.changes())
	hpa := waitHPA(t, c, ns, hpaName, n, n*threshold)
	metric := hpa.Spec.Metrics[0].External.Metric.Name
	if ev := rescaleEvent(t, c, ns, hpaName, n); ev == "" {
		t.Errorf("no SuccessfulRescale event of HPA %s to %d", hpaName, n)
	} else {
		t.Logf("HPA %s: %s", hpaName, ev)
	}
	if v := externalMetric(t, c, ns, metric, so.Name); v != n*threshold*1000 {
		t.Errorf("external.metrics.k8s.io %s: %dm, want %dm (the lag)", metric, v, n*threshold*1000)
	}

	// No lag: back to zero after cooldownPeriod.
	from = time.Now()
	setLag(0)
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
// event for name to size, or "".
func rescaleEvent(t *testing.T, c *cluster.Cluster, ns, name string, size int32) string {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "HorizontalPodAutoscaler", "involvedObject.name": name}.String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == "SuccessfulRescale" && strings.Contains(ev.Message, fmt.Sprintf("New size: %d;", size)) {
			return ev.Source.Component + ": " + ev.Message
		}
	}
	return ""
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
