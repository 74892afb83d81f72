package targets

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/collector/activator"
	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/gathered"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestKnativeStatsLandOnThePodAutoscalersTarget: in Knative mode an
// activator stat, which names a revision, lands on the target its
// PodAutoscaler scales, the one its Revision's pods are scraped for, even
// when that Deployment is not named <revision>-deployment; a revision
// whose PodAutoscaler the cache does not hold falls back to Knative's
// naming rule, counted.
func TestKnativeStatsLandOnThePodAutoscalersTarget(t *testing.T) {
	ctx, c, ns, kn := knativeSetup(t)
	ps := revisionPods(t, c, ns, "shop-00001", 1)
	serveStat(t, ps[0], queuestat.Stat{PodName: ps[0].Name, AverageConcurrentRequests: 2, RequestCount: 3})
	cfg := Config{Knative: KnativeConfig{Enabled: true, Autoscaler: kpaconfig.Default()}}
	r := startReplica(t, c, cfg, func(d *Discovery) func(string) bool { d.useKnative(kn); return nil })

	pa := knativePA(ns, "shop-00001", "", nil)
	pa.Spec.ScaleTargetRef.Name = "shop-v1" // not Knative's naming rule's shop-00001-deployment
	if _, err := kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := &commonv1.TargetRef{Namespace: ns, Name: "shop-v1", ApiVersion: "apps/v1", Kind: "Deployment"}
	testkit.Eventually(t, 30*time.Second, "the Knative target with its ready pod", func() bool {
		w, ok := r.hub.Get(ref)
		return ok && w.ReadyPods == 1
	})
	r.scraper.ScrapeNow(ctx)

	reg := prometheus.NewRegistry()
	m := activator.NewMetrics(reg)
	router := activator.NewRouter(activator.ByPodAutoscaler(r.disc.KnativeScaleTarget, m, zap.NewNop()), nil,
		activator.HubRecorder{Hub: r.hub, Wait: time.Second}, nil, m, zap.NewNop())
	at := time.Now().Truncate(time.Second)
	router.Route(ctx, at, []activator.Stat{
		{Namespace: ns, Name: "shop-00001", PodName: "activator-0", AverageConcurrency: 5, RequestCount: 7},
		// No PodAutoscaler (yet): the naming rule's cart-00001-deployment,
		// which this collector does not measure.
		{Namespace: ns, Name: "cart-00001", PodName: "activator-0", AverageConcurrency: 1, RequestCount: 1},
	})

	w, _ := r.hub.Get(ref)
	var scraped, pushed []*commonv1.MetricSample
	for _, s := range measured(w) {
		switch s.GetSource() {
		case commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE:
			scraped = append(scraped, s)
		case commonv1.SampleSource_SAMPLE_SOURCE_PUSH:
			pushed = append(pushed, s)
		}
	}
	if len(scraped) != 1 || scraped[0].GetAverageConcurrency() != 2 {
		t.Errorf("scraped samples of %s = %v, want one of concurrency 2", ref.Key(), scraped)
	}
	if len(pushed) != 1 || pushed[0].GetAverageConcurrency() != 5 || pushed[0].GetRequestCount() != 7 || !pushed[0].GetTime().AsTime().Equal(at) {
		t.Errorf("pushed samples of %s = %v, want the activator's stat (concurrency 5, 7 requests at %v)", ref.Key(), pushed, at)
	}
	if r.hub.Known(&commonv1.TargetRef{Namespace: ns, Name: "shop-00001-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}) {
		t.Error("the naming rule's target of shop-00001 exists")
	}
	for _, tt := range []struct {
		name, label string
		want        float64
	}{
		{"tidal_collector_activator_resolved_total", "podautoscaler", 1},
		{"tidal_collector_activator_resolved_total", "naming-rule", 1},
		{"tidal_collector_activator_stats_total", "recorded", 1},
		{"tidal_collector_activator_stats_total", "unknown-target", 1},
	} {
		if got := gathered.Sum(t, reg, tt.name, tt.label); got != tt.want {
			t.Errorf("%s{%s} = %v, want %v", tt.name, tt.label, got, tt.want)
		}
	}

	// Lookups straight: a PodAutoscaler the cache does not hold is not
	// found, and one whose scale target names no target is an error.
	if ref, found, err := r.disc.KnativeScaleTarget(ns, "cart-00001"); found || err != nil {
		t.Errorf("KnativeScaleTarget of a missing PodAutoscaler = %v, %v, %v; want not found", ref, found, err)
	}
	bad := knativePA(ns, "bad-00001", "", nil)
	bad.Spec.ScaleTargetRef.Kind = "Deployment!"
	if _, err := kn.PodAutoscalers(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the PodAutoscaler with a bad scale target in the cache", func() bool {
		_, found, _ := r.disc.KnativeScaleTarget(ns, "bad-00001")
		return found
	})
	if _, _, err := r.disc.KnativeScaleTarget(ns, "bad-00001"); err == nil || !strings.Contains(err.Error(), "spec.scaleTargetRef.kind") {
		t.Errorf("KnativeScaleTarget of a bad scale target = %v, want an error naming spec.scaleTargetRef.kind", err)
	}
}
