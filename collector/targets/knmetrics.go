package targets

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/pods"
)

// The metrics of Knative Serving v0.50.0's autoscaler that describe what a
// collector sees of a Revision, under Knative's names, help, types and
// labels as its Prometheus exporter writes them (see decider/knmetrics for
// the deciders' own): the KPA reconciler's pod counts
// (pkg/reconciler/autoscaling/kpa/metrics.go) and the scraper's duration
// (pkg/autoscaler/metrics/stats_scraper.go). Each collector exports them for
// the PodAutoscalers it measures, so several replicas export each series
// once, as Knative's bucket leaders do.

// knScope is the instrumentation scope Knative records them under, in the
// exporter's otel_scope_name label.
const knScope = "knative.dev/serving/pkg/autoscaler"

var knScopeLabels = []string{"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}

// knRevision is what Knative labels a PodAutoscaler's series with.
type knRevision struct {
	ns, name, configuration, service string
	// sel selects the Revision's pods.
	sel labels.Selector
}

func knPodsDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, slices.Concat(knScopeLabels,
		[]string{"k8s_namespace_name", "kn_revision_name", "kn_service_name", "kn_configuration_name"}), nil)
}

var (
	knPodsRequested   = knPodsDesc("kn_revision_pods_requested", "Number of pods autoscaler requested from Kubernetes")
	knPodsCount       = knPodsDesc("kn_revision_pods_count", "Number of pods that are allocated currently")
	knPodsNotReady    = knPodsDesc("kn_revision_pods_not_ready_count", "Number of pods that are not ready currently")
	knPodsPending     = knPodsDesc("kn_revision_pods_pending_count", "Number of pods that are pending currently")
	knPodsTerminating = knPodsDesc("kn_revision_pods_terminating_count", "Number of pods that are terminating currently")
)

// knScrapeBuckets are Knative's scrape duration buckets (its latencyBounds).
var knScrapeBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// podCounts are a Revision's pods by state, as Knative's
// PodAccessor.PodCountsByState counts them: a Pending pod is pending and
// not ready; a Running one is terminating (and not ready) once deleting,
// else ready or not by its Ready condition; pods in other phases count
// nowhere.
type podCounts struct{ ready, notReady, pending, terminating int }

func countPods(objs []any) podCounts {
	var c podCounts
	for _, o := range objs {
		p, ok := o.(*pods.Pod)
		if !ok {
			continue
		}
		switch p.Phase {
		case corev1.PodPending:
			c.pending++
			c.notReady++
		case corev1.PodRunning:
			switch {
			case p.DeletionTimestamp != nil:
				c.terminating++
				c.notReady++
			case p.ReadyCondition: // Knative counts a Running pod ready by it, IP or not
				c.ready++
			default:
				c.notReady++
			}
		}
	}
	return c
}

// knPods exports the pod counts of the Knative PodAutoscalers a Discovery
// measures, read from its caches at each scrape.
type knPods struct{ d *Discovery }

// Describe implements prometheus.Collector.
func (k knPods) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{knPodsRequested, knPodsCount, knPodsNotReady, knPodsPending, knPodsTerminating} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one series of each family per
// measured PodAutoscaler. Requested is the scale the actuator last wrote
// in its status (Knative's reconciler records the same number there), 0
// before it wrote one.
func (k knPods) Collect(ch chan<- prometheus.Metric) {
	d := k.d
	d.mu.Lock()
	revs := make([]*knRevision, 0, len(d.active))
	for _, a := range d.active {
		if a.kn != nil {
			revs = append(revs, a.kn)
		}
	}
	d.mu.Unlock()
	for _, r := range revs {
		objs, _ := pods.List(d.podInformer.GetIndexer(), r.ns, r.sel) // a cache read: fails only without the index
		c := countPods(objs)
		requested := 0
		if d.crd.Knative != nil {
			pa, err := knclient.Get[*knautoscaling.PodAutoscaler](d.crd.Knative.GetStore(), r.ns, r.name)
			if err == nil && pa != nil && pa.Status.DesiredScale != nil && *pa.Status.DesiredScale > 0 {
				requested = int(*pa.Status.DesiredScale)
			}
		}
		lv := []string{knScope, "", "", r.ns, r.name, r.service, r.configuration}
		for desc, v := range map[*prometheus.Desc]int{knPodsRequested: requested, knPodsCount: c.ready,
			knPodsNotReady: c.notReady, knPodsPending: c.pending, knPodsTerminating: c.terminating} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), lv...)
		}
	}
}

// knScrapes is Knative's kn_autoscaler_scrape_duration_seconds: one
// histogram per namespace, configuration and service (Knative leaves the
// revision out), kept while a scraped PodAutoscaler has those labels.
type knScrapes struct {
	vec *prometheus.HistogramVec
	// mu guards byKey (the labels of each scraped PodAutoscaler, by source
	// key; no more entries than measured targets) and refs (how many
	// PodAutoscalers share each series).
	mu    sync.Mutex
	byKey map[string][3]string
	refs  map[[3]string]int
}

func newKnScrapes() *knScrapes {
	return &knScrapes{
		vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kn_autoscaler_scrape_duration_seconds",
			Help:    "The duration of scraping the revision",
			Buckets: knScrapeBuckets,
		}, slices.Concat(knScopeLabels, []string{"k8s_namespace_name", "kn_service_name", "kn_configuration_name"})),
		byKey: map[string][3]string{},
		refs:  map[[3]string]int{},
	}
}

// observer is the histogram source key's scrapes go to.
func (k *knScrapes) observer(key string, r *knRevision) prometheus.Observer {
	l := [3]string{r.ns, r.service, r.configuration}
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.byKey[key]; !ok || old != l {
		if ok {
			k.unrefLocked(old)
		}
		k.byKey[key] = l
		k.refs[l]++
	}
	return k.vec.WithLabelValues(knScope, "", "", l[0], l[1], l[2])
}

// drop forgets source key's scrapes; the series goes with the last
// PodAutoscaler that has its labels.
func (k *knScrapes) drop(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.byKey[key]; ok {
		delete(k.byKey, key)
		k.unrefLocked(l)
	}
}

func (k *knScrapes) unrefLocked(l [3]string) {
	if k.refs[l]--; k.refs[l] <= 0 {
		delete(k.refs, l)
		k.vec.DeleteLabelValues(knScope, "", "", l[0], l[1], l[2])
	}
}
