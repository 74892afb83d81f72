package targets

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestCountPods counts as Knative's PodCountsByState does.
func TestCountPods(t *testing.T) {
	now := metav1.Now()
	pod := func(phase corev1.PodPhase, ready corev1.ConditionStatus, deleting bool) any {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if ready != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		}
		if deleting {
			p.DeletionTimestamp = &now
		}
		trimmed, _ := pods.Trim(p) // as the informer keeps it
		return trimmed
	}
	got := countPods([]any{
		pod(corev1.PodPending, "", false),
		pod(corev1.PodRunning, corev1.ConditionTrue, false),
		pod(corev1.PodRunning, corev1.ConditionTrue, false),
		pod(corev1.PodRunning, corev1.ConditionFalse, false),
		pod(corev1.PodRunning, "", false),
		pod(corev1.PodRunning, corev1.ConditionTrue, true),
		pod(corev1.PodSucceeded, "", false),
		pod(corev1.PodFailed, corev1.ConditionFalse, false),
	})
	if want := (podCounts{ready: 2, notReady: 4, pending: 1, terminating: 1}); got != want {
		t.Errorf("countPods = %+v, want %+v", got, want)
	}
}

// TestKnativeFamiliesOfKnativeSource: for a Knative PodAutoscaler it
// measures, the collector exports the families Knative Serving v0.50.0's
// KPA reconciler and scraper export (read from their source,
// pkg/reconciler/autoscaling/kpa/metrics.go and
// pkg/autoscaler/metrics/stats_scraper.go, by knativetest), with Knative's
// names, help, types, labels and buckets, and Knative's counts: the
// requested scale from the PodAutoscaler's status, the ready, not ready,
// pending and terminating pods of its Revision; one scrape is one
// observation. Deleting the PodAutoscaler removes its series.
func TestKnativeFamiliesOfKnativeSource(t *testing.T) {
	ctx, c, ns, kn := knativeSetup(t)
	knative, err := knativetest.AutoscalerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]knativetest.Metric{}
	for _, m := range knative {
		if m.File != "pkg/autoscaler/scaling/metrics.go" { // the deciders' (decider/knmetrics)
			want[m.Name] = m
		}
	}
	if len(want) != 6 {
		t.Fatalf("%d families of Knative's KPA reconciler and scraper, want 6: %v", len(want), want)
	}

	const rev = "web-00001"
	ps := revisionPods(t, c, ns, rev, 3)
	for _, p := range ps {
		serveStat(t, p, queuestat.Stat{PodName: p.Name, AverageConcurrentRequests: 1})
	}
	// One pod terminating (a finalizer holds it), one never scheduled.
	hold := ps[2]
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, hold.Name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.Client.CoreV1().Pods(ns).Patch(context.Background(), hold.Name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, hold.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rev + "-pending", Labels: map[string]string{knautoscaling.LabelRevision: rev}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"example.com/no-such-node": "true"},
			Containers: []corev1.Container{{Name: "queue-proxy", Image: "example.com/qp:1"}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := startReplica(t, c, Config{Knative: KnativeConfig{Enabled: true}}, func(d *Discovery) func(string) bool { d.useKnative(kn); return nil })
	pa := knativePA(ns, rev, "", nil)
	pa.Labels[knautoscaling.LabelConfiguration] = "web"
	pa.Labels[knautoscaling.LabelService] = "shop"
	pa, err = kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	three := int32(3)
	pa.Status.DesiredScale = &three
	if _, err := kn.PodAutoscalers(ns).UpdateStatus(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	wantLabels := func(m knativetest.Metric) map[string]string {
		l := map[string]string{"otel_scope_name": m.Scope, "otel_scope_version": "", "otel_scope_schema_url": "",
			"k8s_namespace_name": ns, "kn_configuration_name": "web", "kn_service_name": "shop"}
		if slices.Contains(m.Labels, "kn_revision_name") {
			l["kn_revision_name"] = rev
		}
		return l
	}
	counts := map[string]float64{"kn_revision_pods_requested": 3, "kn_revision_pods_count": 2,
		"kn_revision_pods_not_ready_count": 2, "kn_revision_pods_pending_count": 1, "kn_revision_pods_terminating_count": 1}
	var fams map[string]*dto.MetricFamily
	testkit.Eventually(t, 30*time.Second, "Knative's pod counts of the revision", func() bool {
		fams = knFamilies(t, r, ns)
		for name, v := range counts {
			if f := fams[name]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != v {
				return false
			}
		}
		return true
	})
	// The scrape target is set just after the counts show: scrape until
	// one is observed, then once more.
	scrapes := func() uint64 {
		f := knFamilies(t, r, ns)["kn_autoscaler_scrape_duration_seconds"]
		if f == nil {
			return 0
		}
		return f.GetMetric()[0].GetHistogram().GetSampleCount()
	}
	testkit.Eventually(t, 30*time.Second, "a scrape observed", func() bool {
		r.scraper.ScrapeNow(ctx)
		return scrapes() > 0
	})
	before := scrapes()
	r.scraper.ScrapeNow(ctx)
	fams = knFamilies(t, r, ns)
	for name, m := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("%s (%s, unit %q, %s) not exported", name, m.OTelName, m.Unit, m.File)
			continue
		}
		if f.GetHelp() != m.Help || f.GetType() != m.Type || len(f.GetMetric()) != 1 {
			t.Errorf("%s: help %q, type %v, %d series; Knative's %q, %v, one", name, f.GetHelp(), f.GetType(), len(f.GetMetric()), m.Help, m.Type)
			continue
		}
		s := f.GetMetric()[0]
		got := map[string]string{}
		for _, l := range s.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(wantLabels(m)) {
			t.Errorf("%s: labels %v, want Knative's %v", name, got, wantLabels(m))
		}
		if m.Type == dto.MetricType_HISTOGRAM {
			var bounds []float64
			for _, b := range s.GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if !slices.Equal(bounds, m.Buckets) || s.GetHistogram().GetSampleCount() != before+1 {
				t.Errorf("%s: buckets %v, %d observations after %d and a scrape; want Knative's %v, one more", name, bounds,
					s.GetHistogram().GetSampleCount(), before, m.Buckets)
			}
		}
	}

	if err := kn.PodAutoscalers(ns).Delete(ctx, rev, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the revision's series gone with its PodAutoscaler", func() bool {
		return len(knFamilies(t, r, ns)) == 0
	})
}

// knFamilies gathers r's Knative families (kn_*), keeping the series of
// namespace ns.
func knFamilies(t *testing.T, r *replica, ns string) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "kn_") {
			continue
		}
		var keep []*dto.Metric
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "k8s_namespace_name" && l.GetValue() == ns {
					keep = append(keep, m)
				}
			}
		}
		if len(keep) > 0 {
			mf.Metric = keep
			out[mf.GetName()] = mf
		}
	}
	return out
}
