package sim

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tidalscale/tidal/sim/pareto"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// MaxSwept bounds the configurations a sweep makes.
const MaxSwept = 64

// Sweep returns, for each configuration and each fixed keep-alive, a copy
// whose config-autoscaler scale-to-zero-pod-retention-period is that
// keep-alive, named "NAME keep-alive=V": Knative keeps the last pod that
// long once the target turns inactive, a stable window (and at least the
// scale-to-zero grace) after its last request. A configuration with the
// predictive keep-alive falls back to it when its idle times are not
// predictable. The copies keep their configuration's order, keep-alives
// in the order given.
func Sweep(cfgs []Configuration, keepAlives []time.Duration) ([]Configuration, error) {
	if n := len(cfgs) * len(keepAlives); n > MaxSwept {
		return nil, fmt.Errorf("sweep: %d configurations × %d keep-alives = %d, want at most %d", len(cfgs), len(keepAlives), n, MaxSwept)
	}
	var out []Configuration
	for _, c := range cfgs {
		if c.Strategy == StrategyLag {
			return nil, fmt.Errorf("sweep: configuration %s: a lag configuration has no keep-alive", c.Name)
		}
		if _, ok := c.Annotations[kpaconfig.AnnotationScaleToZeroPodRetentionPeriod]; ok {
			return nil, fmt.Errorf("sweep: configuration %s: its annotation %s would override the swept keep-alive", c.Name, kpaconfig.AnnotationScaleToZeroPodRetentionPeriod)
		}
		for _, ka := range keepAlives {
			if ka < 0 {
				return nil, fmt.Errorf("sweep: keep-alive %s: want at least 0", ka)
			}
			s := c
			s.Autoscaler = maps.Clone(c.Autoscaler)
			if s.Autoscaler == nil {
				s.Autoscaler = map[string]string{}
			}
			s.Annotations = maps.Clone(c.Annotations)
			s.Autoscaler[kpaconfig.KeyScaleToZeroPodRetentionPeriod] = ka.String()
			s.group, s.label = c.Name, shortDuration(ka)
			s.Name = c.Name + " keep-alive=" + s.label
			if err := s.Check(); err != nil {
				return nil, fmt.Errorf("sweep: %s: %w", s.Name, err)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// shortDuration writes 0, 30s, 10m, 1h30m.
func shortDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// PlotPareto draws each configuration's idle pod-hours against the
// cold-start rate of its 75th-percentile function (the paper's measure),
// and below against its median function's, joining the points of one
// sweep (results in the order of cfgs).
func PlotPareto(path string, cfgs []Configuration, results []*Result) error {
	var p75, p50 []pareto.Series
	index := map[string]int{}
	for i, r := range results {
		group, label := cfgs[i].group, cfgs[i].label
		if group == "" {
			group = cfgs[i].Name
		}
		k, ok := index[group]
		if !ok {
			k = len(p75)
			index[group] = k
			p75 = append(p75, pareto.Series{Name: group})
			p50 = append(p50, pareto.Series{Name: group})
		}
		x := r.IdlePodSeconds / 3600
		p75[k].Points = append(p75[k].Points, pareto.Point{X: x, Y: 100 * r.ColdStartRates.Quantile(0.75), Label: label})
		p50[k].Points = append(p50[k].Points, pareto.Point{X: x, Y: 100 * r.ColdStartRates.Quantile(0.50), Label: label})
	}
	const xLabel = "idle pod-hours (pods up with no request in them)"
	return pareto.Write(path, []pareto.Panel{
		{Title: "cold starts of the 75th-percentile function against idle pods", XLabel: xLabel, YLabel: "cold-start rate, p75 function (%)", Series: p75},
		{Title: "cold starts of the median function against idle pods", XLabel: xLabel, YLabel: "cold-start rate, p50 function (%)", Series: p50},
	})
}
