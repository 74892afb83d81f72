package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tidalscale/tidal/test/system"
)

// knativeFamilies reads the families of Knative's autoscaler (kn_*) at
// url (a Prometheus text endpoint), each with its series of namespace ns,
// where the one revision of a scene lives (the scrape duration has no
// revision label).
func knativeFamilies(t *testing.T, url, ns string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	out := map[string]*dto.MetricFamily{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "kn_revision_") && !strings.HasPrefix(name, "kn_autoscaler_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "k8s_namespace_name" && l.GetValue() == ns {
					out[name] = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: []*dto.Metric{m}}
				}
			}
		}
	}
	return out, nil
}

// tidalFamilies is knativeFamilies over every tidal service that exports
// some of Knative's families: the decider (its decisions) and each
// collector (pod counts and scrape durations of the revisions it
// measures).
func tidalFamilies(t *testing.T, sys *system.System, ns string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	out := map[string]*dto.MetricFamily{}
	for _, p := range append([]*system.Proc{sys.Decider}, sys.Collectors...) {
		fams, err := knativeFamilies(t, "http://"+p.HTTPAddr+"/metrics", ns)
		if err != nil {
			return nil, err
		}
		for name, f := range fams {
			if out[name] != nil {
				return nil, fmt.Errorf("%s exported by two of tidal's services", name)
			}
			out[name] = f
		}
	}
	return out, nil
}

// labelsOf is a series' labels as name=value, sorted.
func labelsOf(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(out)
	return out
}

// compareKnativeMetrics checks tidal's families of Knative's autoscaler for
// a revision against Knative's own autoscaler's for the same revision:
// each family either exports, the other exports too, with the same name,
// help, type and labels (names and values).
func compareKnativeMetrics(t *testing.T, tidal, knative map[string]*dto.MetricFamily) {
	t.Helper()
	if len(tidal) == 0 {
		t.Fatal("tidal exports none of Knative's families for the revision")
	}
	for _, name := range slices.Sorted(maps.Keys(tidal)) {
		tf, kf := tidal[name], knative[name]
		if kf == nil {
			t.Errorf("tidal exports %s, Knative's autoscaler does not (it has %v)", name, slices.Sorted(maps.Keys(knative)))
			continue
		}
		if tf.GetHelp() != kf.GetHelp() || tf.GetType() != kf.GetType() {
			t.Errorf("%s: tidal's help %q, type %v; Knative's %q, %v", name, tf.GetHelp(), tf.GetType(), kf.GetHelp(), kf.GetType())
		}
		if tl, kl := labelsOf(tf.GetMetric()[0]), labelsOf(kf.GetMetric()[0]); !slices.Equal(tl, kl) {
			t.Errorf("%s: tidal's labels %v, Knative's %v", name, tl, kl)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(knative)) {
		if tidal[name] == nil {
			t.Errorf("Knative's autoscaler exports %s, tidal does not", name)
		}
	}
	t.Logf("Knative's families both export alike: %v", slices.Sorted(maps.Keys(tidal)))
}
