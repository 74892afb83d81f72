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
)

// knativeFamilies reads the kn_revision_* families of url (a Prometheus
// text endpoint), each with the one series of the revision rev.
func knativeFamilies(t *testing.T, url, rev string) (map[string]*dto.MetricFamily, error) {
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
		if !strings.HasPrefix(name, "kn_revision_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kn_revision_name" && l.GetValue() == rev {
					out[name] = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: []*dto.Metric{m}}
				}
			}
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

// compareKnativeMetrics checks tidal's kn_revision_* families for a
// revision against Knative's own autoscaler's for the same revision: every
// family tidal exports, Knative exports with the same name, help, type and
// labels (names and values); it logs Knative's families tidal does not
// export.
func compareKnativeMetrics(t *testing.T, tidal, knative map[string]*dto.MetricFamily) {
	t.Helper()
	if len(tidal) == 0 {
		t.Fatal("tidal exports no kn_revision_* series for the revision")
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
	var missing []string
	for name := range knative {
		if tidal[name] == nil {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	t.Logf("kn_revision_* families both export alike: %v; Knative's that tidal does not: %v", slices.Sorted(maps.Keys(tidal)), missing)
}
