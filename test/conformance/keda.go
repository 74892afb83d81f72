package main

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/kedavector"
)

// kedaFamilies replays ../shared/vectors/keda: KEDA's Kafka scaler lag
// arithmetic, one GetMetricsAndActivity call per poll, with the
// previousOffsets state carried from poll to poll (README there).
var kedaFamilies = []family{{
	name: "keda",
	match: func(doc map[string]json.RawMessage) bool {
		if _, ok := doc["polls"]; !ok {
			return false
		}
		var cfg map[string]json.RawMessage
		if json.Unmarshal(doc["config"], &cfg) != nil {
			return false
		}
		_, ok := cfg["lagThreshold"]
		return ok
	},
	replay: replayKEDA,
}}

func replayKEDA(raw []byte) error {
	v, _, err := kedavector.Parse(raw)
	if err != nil {
		return fmt.Errorf("file json - want a KEDA vector got error %w", err)
	}
	// Every key the vector gives goes through the parser a ScaledObject's
	// metadata goes through: a key tidal does not know fails the replay
	// rather than being dropped.
	cfg, err := v.LagConfig(true)
	if err != nil {
		return &mismatch{at: "config", field: "config", want: "valid", got: err}
	}
	sc, err := lag.New(cfg)
	if err != nil {
		return &mismatch{at: "config", field: "config", want: "valid", got: err}
	}
	base := time.Date(2026, 8, 20, 0, 0, 0, 0, time.UTC)
	var in lag.Input
	for i := range v.Polls {
		p := &v.Polls[i]
		at := fmt.Sprintf("poll %d", i+1)
		in = lag.Input{Partitions: p.Offsets(in.Partitions[:0])}
		d := sc.Decide(&in, base.Add(time.Duration(i)*cfg.TickInterval))
		if m := compareKEDA(at, p, &d, cfg.LagThreshold); m != nil {
			return m
		}
	}
	return nil
}

func compareKEDA(at string, want *kedavector.Poll, d *lag.Decision, threshold int64) *mismatch {
	if d.Status != lag.StatusOK {
		return &mismatch{at: at, field: "input", want: "accepted", got: d.Err}
	}
	k := &d.KEDA
	milli := math.Round(k.Metric * 1000)
	checks := []struct {
		field     string
		want, got any
		present   bool
	}{
		{"want_per_partition_lag", fmt.Sprint(want.WantPerPartition), fmt.Sprint(partLags(d, false)), want.WantPerPartition != nil},
		{"want_per_partition_lag_with_persistent", fmt.Sprint(want.WantPerPartitionWith), fmt.Sprint(partLags(d, true)), want.WantPerPartitionWith != nil},
		{"want_total_lag_before_cap", deref(want.WantTotalBeforeCap), k.TotalLagBeforeCap, want.WantTotalBeforeCap != nil},
		{"want_total_lag_with_persistent", deref(want.WantTotalWith), d.TotalLagWithPersistent, want.WantTotalWith != nil},
		{"want_metric_value", deref(want.WantMetricValue), k.Metric, want.WantMetricValue != nil},
		{"want_metric_milli_value", deref(want.WantMetricMilliValue), milli, want.WantMetricMilliValue != nil},
		{"want_active", deref(want.WantActive), k.Active, want.WantActive != nil},
		{"hpa_desired_replicas_unclamped", deref(want.WantHPAUnclamped), int64(math.Ceil(k.Metric / float64(threshold))), want.WantHPAUnclamped != nil},
	}
	for _, c := range checks {
		if c.present && c.want != c.got {
			return &mismatch{at: at, field: c.field, want: c.want, got: c.got}
		}
	}
	return nil
}

func partLags(d *lag.Decision, withPersistent bool) []int64 {
	out := make([]int64, len(d.Partitions))
	for i, p := range d.Partitions {
		out[i] = p.Lag
		if withPersistent {
			out[i] = p.LagWithPersistent
		}
	}
	return out
}
