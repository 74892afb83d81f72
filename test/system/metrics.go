package system

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrNoSeries is Metric's error when the process exposes no such series.
var ErrNoSeries = errors.New("no such series")

// metricsClient bounds a read of a process's /metrics: a stuck process
// fails the read, not the test's deadline.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// Metric reads the process's /metrics and returns series: a metric name
// sums every series of that metric; a name with labels as the exposition
// writes them, e.g. tidal_collector_activator_stats_total{outcome="recorded"}
// (labels sorted by name, as client_golang writes them), is that one series.
// Counters, gauges and untyped values count. A series the process does
// not expose is an error wrapping ErrNoSeries.
func (p *Proc) Metric(series string) (float64, error) {
	name, _, _ := strings.Cut(series, "{")
	resp, err := metricsClient.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	sum, found := 0.0, false
	for _, m := range mfs[name].GetMetric() {
		if series != name && seriesName(name, m) != series {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		found = true
	}
	if !found {
		return 0, fmt.Errorf("%s metrics: %s: %w", p.Name, series, ErrNoSeries)
	}
	return sum, nil
}

// seriesName writes m as the text exposition names it: name{a="x",b="y"}.
func seriesName(name string, m *dto.Metric) string {
	labels := m.GetLabel()
	if len(labels) == 0 {
		return name
	}
	pairs := make([]string, 0, len(labels))
	for _, l := range labels {
		pairs = append(pairs, l.GetName()+"="+strconv.Quote(l.GetValue()))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}
