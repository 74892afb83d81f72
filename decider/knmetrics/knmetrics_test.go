package knmetrics

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/tidalscale/tidal/apis/knative/knativetest"
	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// TestKnativeNamesAndLabels: a Knative Revision's decision comes out under
// Knative's names, help and labels; a target that is no Revision (tidal's
// own PodAutoscaler) exports none; a revision scaled on rps gets the rps
// family.
func TestKnativeNamesAndLabels(t *testing.T) {
	e := engine.New(engine.Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
	now := time.Unix(1700000000, 0)
	web := engine.Target{Namespace: "shop", Name: "web-00001-deployment", APIVersion: "apps/v1", Kind: "Deployment"}
	api := engine.Target{Namespace: "shop", Name: "api-00001-deployment", APIVersion: "apps/v1", Kind: "Deployment"}
	plain := engine.Target{Namespace: "shop", Name: "plain"}
	for _, s := range []engine.Spec{
		{Target: web, Strategy: engine.KPA, Reachable: true, Knative: &engine.KnativeRevision{Revision: "web-00001", Configuration: "web", Service: "web"}},
		{Target: api, Strategy: engine.KPA, Reachable: true, Annotations: map[string]string{kpaconfig.Prefix + "metric": "rps", kpaconfig.Prefix + "target": "10"},
			Knative: &engine.KnativeRevision{Revision: "api-00001", Configuration: "api"}},
		{Target: plain, Strategy: engine.KPA, Reachable: true},
	} {
		if err := e.Upsert(s, now); err != nil {
			t.Fatal(err)
		}
	}
	// 140 in flight and 35 requests a second at one ready pod each.
	for sec := range 10 {
		at := now.Add(time.Duration(sec)*time.Second + 500*time.Millisecond)
		for _, ref := range []engine.Target{web, api, plain} {
			if _, err := e.Record(ref, engine.Sample{At: at, Stat: kpa.Stat{AverageConcurrentRequests: 140, RequestCount: 35}, ReadyPods: 1}, at); err != nil {
				t.Fatal(err)
			}
		}
		e.Tick(at.Add(600 * time.Millisecond))
	}
	d, _ := e.Get(web)
	series := func(name, value, rev, cfg, svc string) string {
		return name + `{k8s_namespace_name="shop",kn_configuration_name="` + cfg + `",kn_revision_name="` + rev + `",kn_service_name="` + svc +
			`",otel_scope_name="knative.dev/serving/pkg/autoscaler",otel_scope_schema_url="",otel_scope_version=""} ` + value + "\n"
	}
	want := func(name, help, value string, rev, cfg, svc string) string {
		return "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + series(name, value, rev, cfg, svc)
	}
	if d.Desired != 2 || !d.Panicking {
		t.Fatalf("web's decision: desired %d, panicking %v; want 2 in panic (140 in flight at 70 a pod, twice the one ready)", d.Desired, d.Panicking)
	}
	// Families sorted by name, series by labels, as a registry gathers them.
	expected := want("kn_revision_concurrency_stable", "Average of request count per observed pod over the stable window", "140", "web-00001", "web", "web") +
		want("kn_revision_concurrency_target", "The desired concurrent requests for each pod", "70", "web-00001", "web", "web")
	expected += "# HELP kn_revision_panic_mode If greater than 0 the autoscaler is in panic mode\n# TYPE kn_revision_panic_mode gauge\n" +
		series("kn_revision_panic_mode", "1", "api-00001", "api", "") + series("kn_revision_panic_mode", "1", "web-00001", "web", "web")
	expected += "# HELP kn_revision_pods_desired Number of pods the autoscaler wants to allocate\n# TYPE kn_revision_pods_desired gauge\n" +
		series("kn_revision_pods_desired", "5", "api-00001", "api", "") + series("kn_revision_pods_desired", "2", "web-00001", "web", "web")
	expected += want("kn_revision_rps_target_per_second", "The desired concurrent requests for each pod", "7", "api-00001", "api", "")
	got, n := exposition(t, e, "kn_revision_pods_desired", "kn_revision_panic_mode", "kn_revision_concurrency_stable",
		"kn_revision_concurrency_target", "kn_revision_rps_target_per_second")
	if got != expected {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, expected)
	}
	if n != 2*6 {
		t.Errorf("%d series, want 6 for each of the two Revisions and none for the plain target", n)
	}
}

// exposition renders the named families of e's metrics in the text format,
// sorted by name, and counts every series.
func exposition(t *testing.T, e *engine.Engine, names ...string) (string, int) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(e))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
		if slices.Contains(names, mf.GetName()) {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String(), n
}

// TestFamiliesOfKnativeSource: every family Knative Serving v0.50.0's
// deciders export (pkg/autoscaler/scaling/metrics.go, read from the module
// cache and named as knative.dev/pkg's Prometheus exporter names them) is
// exported after a decision, with Knative's help, type and labels, for a
// revision on concurrency and one on rps; and the collector exports no
// family Knative does not.
func TestFamiliesOfKnativeSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := knativetest.AutoscalerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]knativetest.Metric{}
	for _, m := range all {
		if m.File == "pkg/autoscaler/scaling/metrics.go" {
			want[m.Name] = m
		}
	}
	if len(want) != 9 {
		t.Fatalf("%d families in Knative's scaling/metrics.go, want 9 (3, and 3 each for concurrency and rps): %v", len(want), want)
	}
	e := engine.New(engine.Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
	now := time.Unix(1700000000, 0)
	web := engine.Target{Namespace: "shop", Name: "web-00001-deployment", APIVersion: "apps/v1", Kind: "Deployment"}
	api := engine.Target{Namespace: "shop", Name: "api-00001-deployment", APIVersion: "apps/v1", Kind: "Deployment"}
	for _, s := range []engine.Spec{
		{Target: web, Strategy: engine.KPA, Reachable: true, Knative: &engine.KnativeRevision{Revision: "web-00001", Configuration: "web", Service: "web"}},
		{Target: api, Strategy: engine.KPA, Reachable: true, Annotations: map[string]string{kpaconfig.Prefix + "metric": "rps"},
			Knative: &engine.KnativeRevision{Revision: "api-00001", Configuration: "api", Service: "api"}},
	} {
		if err := e.Upsert(s, now); err != nil {
			t.Fatal(err)
		}
	}
	for sec := range 4 {
		at := now.Add(time.Duration(sec)*time.Second + 500*time.Millisecond)
		for _, ref := range []engine.Target{web, api} {
			if _, err := e.Record(ref, engine.Sample{At: at, Stat: kpa.Stat{AverageConcurrentRequests: 3, RequestCount: 3}, ReadyPods: 1}, at); err != nil {
				t.Fatal(err)
			}
		}
		e.Tick(at.Add(600 * time.Millisecond))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(e))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		m, ok := want[mf.GetName()]
		if !ok {
			t.Errorf("%s: not a family of Knative's %s", mf.GetName(), "pkg/autoscaler/scaling/metrics.go")
			continue
		}
		got[mf.GetName()] = true
		if mf.GetHelp() != m.Help || mf.GetType() != m.Type {
			t.Errorf("%s: help %q, type %v; Knative's %q, %v", m.Name, mf.GetHelp(), mf.GetType(), m.Help, m.Type)
		}
		for _, s := range mf.GetMetric() {
			var names []string
			for _, l := range s.GetLabel() {
				names = append(names, l.GetName())
				if l.GetName() == "otel_scope_name" && l.GetValue() != m.Scope {
					t.Errorf("%s: scope %q, Knative's %q", m.Name, l.GetValue(), m.Scope)
				}
			}
			if !slices.Equal(names, m.Labels) {
				t.Errorf("%s: labels %v, Knative's %v", m.Name, names, m.Labels)
			}
		}
	}
	for name, m := range want {
		if !got[name] {
			t.Errorf("%s (%s, unit %q) not exported", name, m.OTelName, m.Unit)
		}
	}
}
