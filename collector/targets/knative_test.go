package targets

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/knativeconfig"
	"github.com/tidalscale/tidal/pods"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// revisionPods creates n pods of Revision rev, as its Deployment's would be
// labelled, and waits until kwok runs them.
func revisionPods(t *testing.T, c *cluster.Cluster, ns, rev string, n int) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", rev, i), Labels: map[string]string{knautoscaling.LabelRevision: rev}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "queue-proxy", Image: "example.com/qp:1"}}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var out []*corev1.Pod
	testkit.Eventually(t, time.Minute, fmt.Sprintf("%d ready pods", n), func() bool {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: knautoscaling.LabelRevision + "=" + rev})
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for i := range list.Items {
			if pods.Ready(&list.Items[i]) {
				out = append(out, &list.Items[i])
			}
		}
		return len(out) == n
	})
	return out
}

func knativePA(ns, name, class string, ann map[string]string) *knautoscaling.PodAutoscaler {
	if ann == nil {
		ann = map[string]string{}
	}
	if class != "" {
		ann[knautoscaling.AnnotationClass] = class
	}
	return &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann,
			Labels: map[string]string{knautoscaling.LabelRevision: name}},
		Spec: knautoscaling.PodAutoscalerSpec{
			ContainerConcurrency: 5,
			ScaleTargetRef:       corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name + "-deployment"},
			Reachability:         knautoscaling.ReachabilityReachable,
			ProtocolType:         knautoscaling.ProtocolHTTP1,
		},
	}
}

// knativeSetup is where the Knative tests start: the shared cluster with
// Knative's CRDs, a namespace of the test's own, a Knative client, and a
// context that ends with the test (within 2 minutes).
func knativeSetup(t *testing.T) (context.Context, *cluster.Cluster, string, *knclient.Client) {
	t.Helper()
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := knativetest.InstallCRDs(ctx, c); err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, ns, kn
}

// TestDiscoveryKnativePodAutoscaler: with Knative mode on, a Knative
// PodAutoscaler of the KPA class is a KPA target named by its Deployment,
// configured from its annotations over config-autoscaler and scraped from
// its Revision's pods; one of Knative's HPA class is not; deleting it
// forgets the target.
func TestDiscoveryKnativePodAutoscaler(t *testing.T) {
	ctx, c, ns, kn := knativeSetup(t)
	ps := revisionPods(t, c, ns, "rev-1", 2)
	for _, p := range ps {
		serveStat(t, p, queuestat.Stat{PodName: p.Name, AverageConcurrentRequests: 3, RequestCount: 4})
	}
	// config-autoscaler's stable window 2m is what the PodAutoscaler's own
	// window annotation overrides.
	acfg, err := kpaconfig.ParseConfig(map[string]string{"stable-window": "2m"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Knative: KnativeConfig{Enabled: true, Autoscaler: acfg}}
	r := startReplica(t, c, cfg, func(d *Discovery) func(string) bool { d.useKnative(kn); return nil })

	for _, pa := range []*knautoscaling.PodAutoscaler{
		knativePA(ns, "rev-1", "", map[string]string{kpaconfig.AnnotationWindow: "90s", kpaconfig.AnnotationScaleDownDelay: "10s"}),
		knativePA(ns, "rev-2", knautoscaling.ClassHPA, nil),
	} {
		if _, err := kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ref := &commonv1.TargetRef{Namespace: ns, Name: "rev-1-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}
	// The discovery counts the ready pods before it hands the target to
	// the scraper: a scrape before that would find nothing to scrape.
	testkit.Eventually(t, 30*time.Second, "the Knative target with 2 ready pods, and scraped", func() bool {
		w, ok := r.hub.Get(ref)
		return ok && w.ReadyPods == 2 && r.scraper.Len() == 1
	})
	w, _ := r.hub.Get(ref)
	if w.Spec.GetStrategy() != commonv1.Strategy_STRATEGY_KPA || w.Spec.GetAnnotations()[kpaconfig.AnnotationWindow] != "90s" ||
		w.Spec.GetContainerConcurrency() != 5 || w.Spec.GetReachability() != deciderv1.Reachability_REACHABILITY_REACHABLE {
		t.Errorf("spec = %v", w.Spec)
	}
	if got, want := w.Retention, 100*time.Second; got != want {
		t.Errorf("retention = %s, want %s (the window annotation plus the scale-down delay)", got, want)
	}
	r.scraper.ScrapeNow(context.Background())
	w, _ = r.hub.Get(ref)
	if s := measured(w); len(s) != 1 || s[0].GetAverageConcurrency() != 6 || s[0].GetRequestCount() != 8 {
		t.Fatalf("samples after a scrape: %v, failures %v; want concurrency 6 and 8 requests from 2 pods", s, w.Failures)
	}
	if r.hub.Known(&commonv1.TargetRef{Namespace: ns, Name: "rev-2-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}) {
		t.Errorf("the HPA-class PodAutoscaler's target is measured")
	}

	// A bad annotation is a config error on the target, not a scrape.
	pa, err := kn.PodAutoscalers(ns).Get(ctx, "rev-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pa.Annotations[kpaconfig.AnnotationWindow] = "1ms"
	if _, err := kn.PodAutoscalers(ns).Update(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the config error", func() bool {
		w, _ := r.hub.Get(ref)
		return strings.Contains(w.Error, "window")
	})

	if err := kn.PodAutoscalers(ns).Delete(ctx, "rev-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the target removed", func() bool { return !r.hub.Known(ref) })
}

func TestKnativeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // error substring; empty means it parses
	}{
		{args: []string{"--knative", "--knative-classes=kpa.autoscaling.knative.dev,kpa.autoscaling.tidal.dev"}},
		{args: []string{"--knative-classes=hpa.autoscaling.knative.dev"}, want: "not a class tidal measures"},
		{args: []string{"--knative-classes=,"}, want: "want 1 to 8 classes"},
		{args: []string{"--knative-config-autoscaler=/nonexistent"}, want: "read config directory"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var c Config
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(new(strings.Builder))
			c.RegisterFlagsWithPrefix("", fs)
			err := fs.Parse(tt.args)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Parse(%v) = %v, want %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestDiscoveryKnativeLiveConfig: a new Knative configuration (an edit of
// config-autoscaler) measures every Knative target again with it: its
// stable window sets the history kept, and target-burst-capacity -1 stops
// the scraping (the activator's stats are the signal then).
func TestDiscoveryKnativeLiveConfig(t *testing.T) {
	ctx, c, ns, kn := knativeSetup(t)
	ps := revisionPods(t, c, ns, "rev-1", 1)
	serveStat(t, ps[0], queuestat.Stat{PodName: ps[0].Name, AverageConcurrentRequests: 2, RequestCount: 1})
	cfg := Config{Knative: KnativeConfig{Enabled: true, Autoscaler: kpaconfig.Default(), ClusterDomain: "cluster.local"}}
	r := startReplica(t, c, cfg, func(d *Discovery) func(string) bool { d.useKnative(kn); return nil })
	if _, err := kn.PodAutoscalers(ns).Create(ctx, knativePA(ns, "rev-1", "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := &commonv1.TargetRef{Namespace: ns, Name: "rev-1-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}
	testkit.Eventually(t, 30*time.Second, "the target with Knative's default window", func() bool {
		w, ok := r.hub.Get(ref)
		return ok && w.Retention == time.Minute
	})

	live := func(data map[string]string) {
		t.Helper()
		as, err := kpaconfig.ParseConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		r.disc.SetKnativeConfig(&knativeconfig.Snapshot{Autoscaler: as, Deployment: kpaconfig.DefaultDeployment(), Network: knativeconfig.DefaultNetwork()})
	}
	// The hub keeps at least a minute: a window longer than that shows.
	live(map[string]string{"stable-window": "2m"})
	testkit.Eventually(t, 30*time.Second, "the edited window", func() bool {
		w, _ := r.hub.Get(ref)
		return w.Retention == 2*time.Minute
	})
	r.scraper.ScrapeNow(context.Background())
	if w, _ := r.hub.Get(ref); len(measured(w)) != 1 {
		t.Fatalf("samples after a scrape: %v, want one", measured(w))
	}

	live(map[string]string{"stable-window": "2m", "target-burst-capacity": "-1"})
	w, _ := r.hub.Get(ref)
	before := len(measured(w))
	testkit.Eventually(t, 30*time.Second, "scraping stopped", func() bool {
		r.scraper.ScrapeNow(context.Background())
		w, _ := r.hub.Get(ref)
		n := len(measured(w))
		stopped := n == before
		before = n
		return stopped
	})
}

// recScraper records the last target Set for each key, then passes it on.
type recScraper struct {
	Scraper
	mu   sync.Mutex
	last map[string]scrape.Target
}

func (r *recScraper) Set(t scrape.Target) {
	r.mu.Lock()
	r.last[t.Ref.Key()] = t
	r.mu.Unlock()
	r.Scraper.Set(t)
}

func (r *recScraper) get(ref *commonv1.TargetRef) scrape.Target {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[ref.Key()]
}

// TestDiscoveryKnativeMeshFollowsConfigNetwork: a Knative target is scraped
// through its PodAutoscaler's private Service (status.metricsServiceName,
// port 9090, by its full name in --cluster-domain) as config-network's
// mesh-compatibility-mode says, auto until config-network is read, with
// the Service's host on the pods' requests under
// enable-mesh-pod-addressability, and an edit of it applies to the running
// target (collector/scrape's TestScrapeMesh* and TestScrapeDirectLB show
// what each mode does).
func TestDiscoveryKnativeMeshFollowsConfigNetwork(t *testing.T) {
	ctx, c, ns, kn := knativeSetup(t)
	cfg := Config{Knative: KnativeConfig{Enabled: true, Autoscaler: kpaconfig.Default(), ClusterDomain: "example.internal"}}
	rec := &recScraper{last: map[string]scrape.Target{}}
	r := startReplica(t, c, cfg, func(d *Discovery) func(string) bool {
		d.useKnative(kn)
		rec.Scraper, d.scraper = d.scraper, rec
		return nil
	})
	pa, err := kn.PodAutoscalers(ns).Create(ctx, knativePA(ns, "rev-1", "", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := &commonv1.TargetRef{Namespace: ns, Name: "rev-1-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}
	testkit.Eventually(t, 30*time.Second, "the target scraped from its pods alone", func() bool {
		tg := rec.get(ref)
		return tg.Ref != nil && tg.Service == "" && tg.Duration != nil
	})
	pa.Status.MetricsServiceName = "rev-1-private"
	if _, err := kn.PodAutoscalers(ns).UpdateStatus(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := "rev-1-private." + ns + ".svc.example.internal:9090"
	testkit.Eventually(t, 30*time.Second, "the private Service, mode auto", func() bool {
		tg := rec.get(ref)
		return tg.Service == svc && tg.Mesh == scrape.MeshAuto
	})
	for _, mode := range []struct {
		value          knativeconfig.MeshMode
		podAddressable bool
		want           scrape.Mesh
		host           string
	}{
		{knativeconfig.MeshEnabled, false, scrape.MeshEnabled, ""},
		{knativeconfig.MeshDisabled, false, scrape.MeshDisabled, ""},
		{knativeconfig.MeshAuto, true, scrape.MeshAuto, "rev-1-private." + ns},
		{knativeconfig.MeshAuto, false, scrape.MeshAuto, ""},
	} {
		r.disc.SetKnativeConfig(&knativeconfig.Snapshot{Autoscaler: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(),
			Network: knativeconfig.Network{MeshCompatibilityMode: mode.value, EnableMeshPodAddressability: mode.podAddressable}})
		testkit.Eventually(t, 30*time.Second, fmt.Sprintf("mesh-compatibility-mode %s, pod addressability %v", mode.value, mode.podAddressable), func() bool {
			tg := rec.get(ref)
			return tg.Service == svc && tg.Mesh == mode.want && tg.PodHost == mode.host
		})
	}
}
