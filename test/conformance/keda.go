package main

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
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

type kedaVector struct {
	Topic  string `json:"topic"`
	Config struct {
		LagThreshold               int64   `json:"lagThreshold"`
		ActivationLagThreshold     int64   `json:"activationLagThreshold"`
		OffsetResetPolicy          string  `json:"offsetResetPolicy"`
		AllowIdleConsumers         bool    `json:"allowIdleConsumers"`
		ScaleToZeroOnInvalidOffset bool    `json:"scaleToZeroOnInvalidOffset"`
		ExcludePersistentLag       bool    `json:"excludePersistentLag"`
		LimitToPartitionsWithLag   bool    `json:"limitToPartitionsWithLag"`
		PartitionLimitation        *string `json:"partitionLimitation"`
	} `json:"config"`
	Polls []kedaPoll `json:"polls"`
}

type kedaPoll struct {
	Partitions []struct {
		Partition int32  `json:"partition"`
		Latest    int64  `json:"latest"`
		Committed *int64 `json:"committed"`
	} `json:"partitions"`
	WantMetricValue      *float64 `json:"want_metric_value"`
	WantMetricMilliValue *float64 `json:"want_metric_milli_value"`
	WantActive           *bool    `json:"want_active"`
	WantPerPartition     []int64  `json:"want_per_partition_lag"`
	WantPerPartitionWith []int64  `json:"want_per_partition_lag_with_persistent"`
	WantTotalBeforeCap   *int64   `json:"want_total_lag_before_cap"`
	WantTotalWith        *int64   `json:"want_total_lag_with_persistent"`
	WantHPAUnclamped     *int64   `json:"hpa_desired_replicas_unclamped"`
}

func kedaConfig(v *kedaVector) (lag.Config, error) {
	c := lag.DefaultConfig(lag.ModeKEDA)
	c.Faithful = true
	c.Topic = v.Topic
	c.LagThreshold = v.Config.LagThreshold
	c.ActivationLagThreshold = v.Config.ActivationLagThreshold
	if v.Config.OffsetResetPolicy != "" {
		c.OffsetResetPolicy = lag.OffsetResetPolicy(v.Config.OffsetResetPolicy)
	}
	c.AllowIdleConsumers = v.Config.AllowIdleConsumers
	c.ScaleToZeroOnInvalidOffset = v.Config.ScaleToZeroOnInvalidOffset
	c.ExcludePersistentLag = v.Config.ExcludePersistentLag
	c.LimitToPartitionsWithLag = v.Config.LimitToPartitionsWithLag
	if v.Config.PartitionLimitation != nil {
		ids, err := lagconfig.ParsePartitionLimitation(*v.Config.PartitionLimitation)
		if err != nil {
			return c, err
		}
		c.PartitionLimitation = ids
	}
	return c, c.Validate()
}

func replayKEDA(raw []byte) error {
	var v kedaVector
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("file json - want a KEDA vector got error %w", err)
	}
	cfg, err := kedaConfig(&v)
	if err != nil {
		return &mismatch{at: "config", field: "config", want: "valid", got: err}
	}
	sc, err := lag.New(cfg)
	if err != nil {
		return &mismatch{at: "config", field: "config", want: "valid", got: err}
	}
	base := time.Date(2026, 8, 20, 0, 0, 0, 0, time.UTC)
	var in lag.Input
	for i, p := range v.Polls {
		at := fmt.Sprintf("poll %d", i+1)
		in = lag.Input{Partitions: in.Partitions[:0]}
		for _, q := range p.Partitions {
			part := lag.Partition{ID: q.Partition, End: q.Latest}
			if q.Committed != nil {
				part.Committed, part.HasCommitted = *q.Committed, true
			}
			in.Partitions = append(in.Partitions, part)
		}
		d := sc.Decide(&in, base.Add(time.Duration(i)*cfg.TickInterval))
		if m := compareKEDA(at, &p, &d, cfg.LagThreshold); m != nil {
			return m
		}
	}
	return nil
}

func compareKEDA(at string, want *kedaPoll, d *lag.Decision, threshold int64) *mismatch {
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
