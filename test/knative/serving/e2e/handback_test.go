package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"knative.dev/serving/pkg/apis/autoscaling"

	"github.com/tidalscale/tidal/test/knative/knactivator"
)

// TestUninstallGivesPodAutoscalersBack follows README's way back from
// tidal to Knative's autoscaler: tidal scales a Revision, its three
// services stop as `helm uninstall` stops them (the chart's own objects are
// test/chart's), and Knative Serving v0.50.0's own autoscaler
// (cmd/autoscaler, built by test/knative/serving) takes the PodAutoscaler
// back with nothing of tidal's in its way: no finalizer, no object only
// tidal knew, the ServerlessService tidal made accepted as it is. Knative's
// autoscaler then writes the status, creates its Metric, measures the
// simulated queue-proxies itself and scales the Revision down, to zero
// behind the activator, and back on a request Knative's activator code
// reports to it over its own websocket.
func TestUninstallGivesPodAutoscalersBack(t *testing.T) {
	s := startScene(t)
	ctx := context.Background()
	s.createService(t, nil)
	s.waitRevisionReady(t)
	up := kpaWant(32 * serviceTime.Seconds())
	s.rate.Set(32)
	s.reps.waitReady(t, s.kc, up, 90*time.Second, "tidal: step up")
	pa := s.waitTidalPA(t)
	// README's check that tidal is in charge: its actuator alone writes
	// the status.
	if w := managers(pa.ManagedFields, "status"); !slices.Equal(w, []string{"tidal-actuator"}) {
		t.Errorf("the PodAutoscaler's status written by %q while tidal holds it, want tidal-actuator alone", w)
	}
	sks, err := s.nc.NetworkingV1alpha1().ServerlessServices(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// tidal's decider exports its decisions under Knative's names, its
	// collector the pods and scrapes (after a scrape of the revision).
	var tidalMetrics map[string]*dto.MetricFamily
	eventually(t, s.kc, 30*time.Second, "tidal's kn_* metrics of the revision", func() (bool, string) {
		var err error
		tidalMetrics, err = tidalFamilies(t, s.tidal, s.ns)
		return err == nil && tidalMetrics["kn_revision_pods_desired"] != nil && tidalMetrics["kn_autoscaler_scrape_duration_seconds"] != nil,
			fmt.Sprintf("%v: families %v", err, slices.Sorted(maps.Keys(tidalMetrics)))
	})

	// Uninstall: tidal's services stop. What they leave must need no
	// tidal to go away.
	if err := s.tidal.Stop(); err != nil {
		t.Fatalf("stop tidal: %v", err)
	}
	// The activators' connections to the collectors end with them; they
	// dial the restored autoscaler Service (a new connection below).
	_ = s.act.Conn.Shutdown()
	t.Logf("tidal stopped at %d pods", s.reps.last().spec)
	checkNothingWaitsOnTidal(ctx, t, s)

	// Knative's autoscaler, as serving-core.yaml runs it, with its
	// activators: the Service they dial is its stats server again.
	wrapper := filepath.Join(t.TempDir(), "autoscaler")
	withHosts(t, s.knBins.Autoscaler, wrapper, s.hosts())
	handback := time.Now()
	ka := startAutoscaler(t, wrapper, s.c)
	ka.waitLeader(ctx, t, s.c, "autoscaler-bucket", time.Minute)
	act := knactivator.Start(t, fmt.Sprintf("ws://127.0.0.1:%d", autoscalerStatsPort), "activator-e2e-knative")
	act.WaitReady(t, 30*time.Second)
	s.front.useActivator(act.Handler())

	// It takes the PodAutoscaler: its Metric, controlled by the
	// PodAutoscaler (tidal makes none).
	eventually(t, ka, 60*time.Second, "Knative's Metric for the Revision", func() (bool, string) {
		m, err := s.sc.AutoscalingV1alpha1().Metrics(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(m, pa), fmt.Sprintf("owners %+v", m.OwnerReferences)
	})
	t.Logf("Knative's autoscaler made its Metric %s after it started", time.Since(handback).Round(100*time.Millisecond))

	// It measures the queue-proxies and scales: 10 requests/s of 1 s
	// each want kpaWant(10) = 2 pods. Its status writes follow its
	// decisions: the PodAutoscaler Ready, its status now written by
	// Knative's autoscaler; the same ServerlessService, still controlled by
	// the PodAutoscaler; the Deployment's scale written by it.
	down := kpaWant(10 * serviceTime.Seconds())
	from := time.Now()
	s.rate.Set(10)
	s.reps.waitReady(t, ka, down, 90*time.Second, "Knative: step down")
	t.Logf("Knative: %d → %d pods %s after the load fell", up, down, time.Since(from).Round(100*time.Millisecond))
	eventually(t, ka, 30*time.Second, "the PodAutoscaler Ready, its status written by Knative's autoscaler", func() (bool, string) {
		got, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		writers := managers(got.ManagedFields, "status")
		return got.IsReady() && slices.ContainsFunc(writers, notTidal) && got.Status.DesiredScale != nil && *got.Status.DesiredScale == down,
			fmt.Sprintf("status writers %q, status %+v", writers, got.Status)
	})
	// Knative's own metrics for the same revision: what tidal exported
	// has the same names, help, types and labels.
	var knMetrics map[string]*dto.MetricFamily
	eventually(t, ka, 30*time.Second, "Knative's autoscaler's kn_revision_* metrics", func() (bool, string) {
		var err error
		knMetrics, err = knativeFamilies(t, "http://"+knativeMetricsAddr+"/metrics", s.ns)
		return err == nil && knMetrics["kn_revision_pods_desired"] != nil && knMetrics["kn_revision_pods_count"] != nil &&
			knMetrics["kn_autoscaler_scrape_duration_seconds"] != nil, fmt.Sprintf("%v: families %v", err, slices.Sorted(maps.Keys(knMetrics)))
	})
	compareKnativeMetrics(t, tidalMetrics, knMetrics)

	after, err := s.nc.NetworkingV1alpha1().ServerlessServices(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != sks.UID || !metav1.IsControlledBy(after, pa) {
		t.Errorf("ServerlessService %s (owners %+v) after the handback, want tidal's %s, controlled by the PodAutoscaler", after.UID, after.OwnerReferences, sks.UID)
	}
	d, err := s.c.Client.AppsV1().Deployments(s.ns).Get(ctx, s.rev+"-deployment", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if writers := managers(d.ManagedFields, "scale"); !slices.ContainsFunc(writers, notTidal) {
		t.Errorf("the Deployment's scale written by %q, want Knative's autoscaler among them", writers)
	}

	// To zero behind the activator, and back on a request reported to
	// Knative's autoscaler.
	s.scaleToZero(t, "Knative")
	s.backFromZero(t, "Knative")
	if act.Connects.Load() == 0 {
		t.Error("Knative's activator code never connected to Knative's autoscaler")
	}
}

// notTidal reports whether a field manager is none of tidal's services
// (each writes under its binary's name, as actuator/scale.FieldManager).
func notTidal(manager string) bool {
	return !slices.Contains([]string{"tidal-actuator", "tidal-collector", "tidal-decider"}, manager)
}

// checkNothingWaitsOnTidal lists every object of every resource type the
// API serves and fails t on what tidal's services left behind that could
// hold anything up or that only tidal would clean: a finalizer of
// tidal's, an object tidal wrote other than the PodAutoscaler's status,
// the ServerlessService (controlled by the PodAutoscaler, for Knative's
// autoscaler to take over), the Deployment's scale and Events (which
// expire). Leases would be the chart namespace's, gone with it; this test
// runs tidal without bucket Leases.
func checkNothingWaitsOnTidal(ctx context.Context, t *testing.T, s *scene) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(s.c.Config())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.c.Config())
	if err != nil {
		t.Fatal(err)
	}
	lists, err := discovery.ServerPreferredResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{
		"podautoscalers.autoscaling.internal.knative.dev":    true,
		"serverlessservices.networking.internal.knative.dev": true,
		"deployments.apps":     true,
		"events.events.k8s.io": true,
		"events.":              true,
	}
	checked := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") {
				continue
			}
			kind := r.Name + "." + gv.Group
			objs, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Errorf("list %s: %v", kind, err)
				continue
			}
			for _, o := range objs.Items {
				checked++
				name := o.GetNamespace() + "/" + o.GetName()
				for _, f := range o.GetFinalizers() {
					if strings.Contains(f, "tidal") {
						t.Errorf("%s %s: finalizer %q left by tidal", kind, name, f)
					}
				}
				var wrote []string
				for _, e := range o.GetManagedFields() {
					if !notTidal(e.Manager) {
						wrote = append(wrote, e.Manager)
					}
				}
				if len(wrote) > 0 && !allowed[kind] {
					t.Errorf("%s %s: written by %q, left behind by tidal", kind, name, wrote)
				}
			}
		}
	}
	pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(pa.ManagedFields, ""); slices.ContainsFunc(got, func(m string) bool { return !notTidal(m) }) {
		t.Errorf("PodAutoscaler metadata or spec written by %q: tidal writes only its status", got)
	}
	if pa.Annotations[autoscaling.ClassAnnotationKey] != autoscaling.KPA {
		t.Errorf("PodAutoscaler class %q, want Knative's %q", pa.Annotations[autoscaling.ClassAnnotationKey], autoscaling.KPA)
	}
	t.Logf("after tidal stopped: %d objects checked, nothing of tidal's left but the PodAutoscaler's status, the ServerlessService, the Deployment's scale and Events", checked)
}
