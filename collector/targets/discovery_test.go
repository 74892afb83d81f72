package targets

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/pods"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/shard/bucket"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// replica is one collector's measuring side: discovery feeding a hub, a
// scraper and a lag fetcher, all real.
type replica struct {
	reg     *prometheus.Registry
	hub     *dispatch.Hub
	scraper *scrape.Scraper
	fetcher *lag.Fetcher
	disc    *Discovery
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startReplica(t *testing.T, c *cluster.Cluster, cfg Config, owns func(*Discovery) func(string) bool) *replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := zap.NewNop()
	r := &replica{reg: reg, hub: dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 16}, dispatch.NewMetrics(reg), log)}
	var sc scrape.Config
	sc.RegisterFlagsWithPrefix("", flag.NewFlagSet("t", flag.PanicOnError))
	sc.Interval = time.Hour // driven by ScrapeNow
	r.scraper = scrape.New(sc, r.hub, scrape.NewMetrics(reg), log)
	r.fetcher = lag.New(lag.Config{Tick: time.Hour, Timeout: 2 * time.Second}, r.hub, lag.NewMetrics(reg), log)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	r.disc = New(cfg, c.Client, tidal, r.hub, r.scraper, r.fetcher, log)
	r.disc.RegisterMetrics(reg)
	if owns != nil {
		r.disc.SetOwnership(owns(r.disc))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Go(func() { _ = r.scraper.Run(ctx) })
	r.wg.Go(func() { _ = r.fetcher.Run(ctx) })
	if err := r.disc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.wg.Go(func() { _ = r.disc.Run(ctx) })
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	r.wg.Wait()
}

func kpaObjects(ns, name string, selector map[string]string) (*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric) {
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
			"autoscaling.knative.dev/target": "10", "unrelated.example.com/x": "y",
		}},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef:       autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name + "-deployment"},
			Strategy:             autoscalingv1alpha1.StrategyKPA,
			ContainerConcurrency: 5,
		},
	}
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"autoscaling.knative.dev/scale-down-delay": "30s"}},
		Spec: autoscalingv1alpha1.MetricSpec{
			StableWindow: metav1.Duration{Duration: time.Minute},
			// As the actuator resolves it from the annotation.
			ScaleDownDelay: &metav1.Duration{Duration: 30 * time.Second},
			ScrapeTarget:   name + "-deployment",
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	return pa, m
}

func createKPA(t *testing.T, tidal tidalclient.Interface, pa *autoscalingv1alpha1.PodAutoscaler, m *autoscalingv1alpha1.Metric) {
	t.Helper()
	ctx := context.Background()
	if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(pa.Namespace).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tidal.AutoscalingV1alpha1().Metrics(m.Namespace).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readyPods creates n pods labelled app=name and waits until kwok runs them.
func readyPods(t *testing.T, c *cluster.Cluster, ns, name string, n int) []*corev1.Pod {
	t.Helper()
	return readyPodsFrom(t, c, ns, name, 0, n)
}

// readyPodsFrom creates n more pods labelled app=name, numbered from first,
// and waits until kwok runs them.
func readyPodsFrom(t *testing.T, c *cluster.Cluster, ns, name string, first, n int) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	for i := first; i < first+n; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var out []*corev1.Pod
	testkit.Eventually(t, time.Minute, fmt.Sprintf("%d ready pods", n), func() bool {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for i := range list.Items {
			var num int
			if _, err := fmt.Sscanf(strings.TrimPrefix(list.Items[i].Name, name+"-"), "%d", &num); err != nil || num < first {
				continue // not one of these
			}
			if pods.Ready(&list.Items[i]) {
				out = append(out, &list.Items[i])
			}
		}
		return len(out) == n
	})
	return out
}

// serveStat listens at the pod's IP as its queue-proxy would.
func serveStat(t *testing.T, p *corev1.Pod, s queuestat.Stat) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, "9090"))
	if err != nil {
		t.Fatal(err)
	}
	body := queuestat.Marshal(s)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", queuestat.ContentType)
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func TestDiscoveryKPATargetScrapedFromItsPods(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	pods := readyPods(t, c, ns, "hello", 3)
	for _, p := range pods {
		serveStat(t, p, queuestat.Stat{PodName: p.Name, AverageConcurrentRequests: 2, RequestCount: 3})
	}
	r := startReplica(t, c, Config{}, nil)
	pa, m := kpaObjects(ns, "hello", map[string]string{"app": "hello"})
	createKPA(t, tidal, pa, m)
	ref := &commonv1.TargetRef{Namespace: ns, Name: "hello-deployment"}

	// The discovery counts the ready pods before it hands the target to
	// the scraper: a scrape before that would find nothing to scrape.
	testkit.Eventually(t, 30*time.Second, "the KPA target with 3 ready pods, and scraped", func() bool {
		w, ok := r.hub.Get(ref)
		return ok && w.ReadyPods == 3 && r.scraper.Len() == 1
	})
	w, _ := r.hub.Get(ref)
	if w.Spec.GetStrategy() != commonv1.Strategy_STRATEGY_KPA || w.Spec.GetAnnotations()["autoscaling.knative.dev/target"] != "10" ||
		w.Spec.GetContainerConcurrency() != 5 || w.Spec.GetTarget().GetKind() != "Deployment" {
		t.Errorf("spec = %v", w.Spec)
	}
	if _, ok := w.Spec.GetAnnotations()["unrelated.example.com/x"]; ok {
		t.Errorf("spec carries a foreign annotation: %v", w.Spec.GetAnnotations())
	}
	if w.Retention != 90*time.Second {
		t.Errorf("retention = %s, want the stable window plus the scale-down delay (1m30s)", w.Retention)
	}
	if names := r.disc.ReadyPodNames(ref); len(names) != 3 {
		t.Errorf("ReadyPodNames = %v, want 3", names)
	}
	r.scraper.ScrapeNow(context.Background())
	w, _ = r.hub.Get(ref)
	if len(measured(w)) != 1 || measured(w)[0].GetAverageConcurrency() != 6 || measured(w)[0].GetRequestCount() != 9 || measured(w)[0].GetReadyPods() != 3 {
		t.Fatalf("samples after a scrape: %v, failures %v; want concurrency 6, 9 rps, 3 pods", measured(w), w.Failures)
	}

	// A pod goes away: the ready count follows through the informer.
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).Delete(context.Background(), pods[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "2 ready pods", func() bool { w, _ := r.hub.Get(ref); return w.ReadyPods == 2 })
	r.scraper.ScrapeNow(context.Background())
	w, _ = r.hub.Get(ref)
	if last := measured(w)[len(measured(w))-1]; last.GetReadyPods() != 2 || last.GetAverageConcurrency() != 4 {
		t.Errorf("sample after the pod left: %v, want 2 pods, concurrency 4", last)
	}

	// A Metric asking for the Prometheus format without a series name is
	// refused with an error state, not scraped.
	m, err = tidal.AutoscalingV1alpha1().Metrics(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Annotations[AnnotationFormat] = "prometheus"
	if _, err := tidal.AutoscalingV1alpha1().Metrics(ns).Update(context.Background(), m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the config error state", func() bool {
		w, _ := r.hub.Get(ref)
		return strings.Contains(w.Error, AnnotationMetricName)
	})

	// The Metric is deleted: the target is forgotten.
	if err := tidal.AutoscalingV1alpha1().Metrics(ns).Delete(context.Background(), "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the target removed", func() bool { return !r.hub.Known(ref) })
}

func seedKafka(t *testing.T, k *kfake.Cluster, topic string, records int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for range records {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDiscoveryLagTargets(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := kfake.MustCluster(kfake.NumBrokers(1))
	defer k.Close()
	seedKafka(t, k, "orders", 7)
	r := startReplica(t, c, Config{KafkaBrokers: k.ListenAddrs()}, nil)
	ctx := context.Background()

	// A Function: riff's lag target on its input topic, group = its name.
	fn := &functionsv1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "square"},
		Spec:       functionsv1alpha1.FunctionSpec{Container: corev1.Container{Image: "example.com/square"}, Input: "orders", LagMode: functionsv1alpha1.LagModeRiff},
	}
	if _, err := tidal.FunctionsV1alpha1().Functions(ns).Create(ctx, fn, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fnRef := &commonv1.TargetRef{Namespace: ns, Name: "square"}
	testkit.Eventually(t, 30*time.Second, "the Function's lag target", func() bool { return r.hub.Known(fnRef) })
	r.fetcher.FetchNow(ctx)
	w, _ := r.hub.Get(fnRef)
	if w.Spec.GetStrategy() != commonv1.Strategy_STRATEGY_LAG || w.Spec.GetAnnotations()["lag.tidal.dev/topic"] != "orders" || w.Spec.GetAnnotations()["lag.tidal.dev/mode"] != "riff-queue" {
		t.Errorf("function spec = %v", w.Spec)
	}
	if len(measured(w)) != 1 || measured(w)[0].GetPartitionCount() != 2 || w.Error != "" {
		t.Fatalf("function samples %v error %q; want one sample of 2 partitions", measured(w), w.Error)
	}
	var end int64
	for _, p := range measured(w)[0].GetPartitionLags() {
		end += p.GetEndOffset()
		if p.CommittedOffset != nil {
			t.Errorf("partition %d has a committed offset; the group never committed", p.GetPartition())
		}
	}
	if end != 7 {
		t.Errorf("end offsets sum to %d, want the 7 records", end)
	}

	// A lag PodAutoscaler whose brokers are in a Secret that does not exist
	// yet: an error state, then a sample once the Secret is there.
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "billing"},
			Strategy:       autoscalingv1alpha1.StrategyLag,
			Lag: &autoscalingv1alpha1.LagSource{
				BrokersSecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "kafka"}, Key: "brokers"},
				Topic:            "orders", ConsumerGroup: "billing", Mode: autoscalingv1alpha1.LagModeKEDA,
				KEDA: &autoscalingv1alpha1.KEDALagParameters{LagThreshold: 5},
			},
		},
	}
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
		Spec:       autoscalingv1alpha1.MetricSpec{StableWindow: metav1.Duration{Duration: time.Minute}, Lag: pa.Spec.Lag.DeepCopy()},
	}
	createKPA(t, tidal, pa, m)
	billing := &commonv1.TargetRef{Namespace: ns, Name: "billing"}
	testkit.Eventually(t, 30*time.Second, "the missing-secret error", func() bool {
		w, ok := r.hub.Get(billing)
		return ok && strings.Contains(w.Error, `secret `+ns+`/kafka`)
	})
	w, _ = r.hub.Get(billing)
	if w.Spec.GetAnnotations()["lag.tidal.dev/mode"] != "keda" || w.Spec.GetAnnotations()["lag.tidal.dev/lagThreshold"] != "5" {
		t.Errorf("lag spec = %v", w.Spec)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kafka"}, StringData: map[string]string{"brokers": strings.Join(k.ListenAddrs(), ",")}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Touch the Metric so the target is read again (Secrets are re-read on
	// a change of the object or at the informers' resync).
	m, err = tidal.AutoscalingV1alpha1().Metrics(ns).Get(ctx, "billing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Annotations = map[string]string{"touched": "1"}
	if _, err := tidal.AutoscalingV1alpha1().Metrics(ns).Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "a lag sample for the PodAutoscaler", func() bool {
		r.fetcher.FetchNow(ctx)
		w, _ := r.hub.Get(billing)
		return len(measured(w)) > 0 && w.Error == ""
	})
}

// TestReplicasSplitTargetsAndTakeOver is the scaling-out acceptance test:
// two collector replicas split the targets through bucket Leases; when one
// stops the other has all its targets within one lease duration. (A replica
// that dies without releasing its Leases is package bucket's test: its
// buckets move within one lease duration too.)
func TestReplicasSplitTargetsAndTakeOver(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var refs []*commonv1.TargetRef
	for i := range n {
		pa, m := kpaObjects(ns, fmt.Sprintf("svc-%02d", i), map[string]string{"app": "none"})
		createKPA(t, tidal, pa, m)
		refs = append(refs, &commonv1.TargetRef{Namespace: ns, Name: pa.Spec.ScaleTargetRef.Name})
	}
	leaseCfg := func(id string) bucket.Config {
		return bucket.Config{Buckets: 8, Namespace: ns, Prefix: "collector", LeaseDuration: 3 * time.Second,
			RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, Identity: id}
	}
	start := func(id string) (*replica, context.CancelFunc, chan struct{}) {
		var set *bucket.Set
		r := startReplica(t, c, Config{}, func(d *Discovery) func(string) bool {
			set = bucket.New(leaseCfg(id), c.Client, d.Resync, prometheus.NewRegistry(), zap.NewNop())
			return set.Owns
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = set.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return r, cancel, done
	}
	a, stopA, doneA := start("a:9001")
	b, _, _ := start("b:9001")
	split := func(rs ...*replica) func() bool {
		return func() bool {
			for _, ref := range refs {
				held := 0
				for _, r := range rs {
					if r.hub.Known(ref) {
						held++
					}
				}
				if held != 1 {
					return false
				}
			}
			return true
		}
	}
	testkit.Eventually(t, 30*time.Second, "every target held by exactly one replica, both replicas holding some", func() bool {
		if !split(a, b)() {
			return false
		}
		na, nb := 0, 0
		for _, ref := range refs {
			if a.hub.Known(ref) {
				na++
			}
			if b.hub.Known(ref) {
				nb++
			}
		}
		return na > 0 && nb > 0
	})
	heldByA := 0
	for _, ref := range refs {
		if a.hub.Known(ref) {
			heldByA++
		}
	}
	t.Logf("replica a holds %d of %d targets", heldByA, n)

	stopA()
	<-doneA
	a.stop()
	began := time.Now()
	testkit.Eventually(t, 3*time.Second+2*550*time.Millisecond+time.Second, "replica b to hold every target", split(b))
	t.Logf("b held all %d targets %s after a stopped (lease duration 3s)", n, time.Since(began))
}

// measured returns the window's measurements, without the ready-count
// changes (PODS samples) the hub keeps among them.
func measured(w dispatch.Window) []*commonv1.MetricSample {
	var out []*commonv1.MetricSample
	for _, s := range w.Samples {
		if s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_PODS {
			out = append(out, s)
		}
	}
	return out
}
