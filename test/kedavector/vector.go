// Package kedavector reads the KEDA Kafka scaler vectors (the format is in
// the vectors' README: ../shared/vectors/keda) and serves a vector's offsets
// from a Kafka-protocol broker, for every replay of them: the conformance
// command (strategy/lag in-process), the collector's ExternalScaler API and
// KEDA's own client (test/keda).
package kedavector

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Group is the consumer group of every vector (the README's harness used
// vec-group); Topic is the topic the README names.
const (
	Group = "vec-group"
	Topic = "vec-topic"
)

// Vector is one vector file.
type Vector struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	// Config holds KEDA's kafka trigger keys as the vector writes them.
	// Every key is passed on, so that a vector with a key no replay here
	// names still replays as written (or fails naming the key).
	Config map[string]json.RawMessage `json:"config"`
	Polls  []Poll                     `json:"polls"`
}

// Poll is one GetMetricsAndActivity call: the offsets, then what KEDA's
// scaler returned (each want_ field is absent from some vectors).
type Poll struct {
	Partitions           []Partition `json:"partitions"`
	WantMetricValue      *float64    `json:"want_metric_value"`
	WantMetricMilliValue *float64    `json:"want_metric_milli_value"`
	WantActive           *bool       `json:"want_active"`
	WantPerPartition     []int64     `json:"want_per_partition_lag"`
	WantPerPartitionWith []int64     `json:"want_per_partition_lag_with_persistent"`
	WantTotalBeforeCap   *int64      `json:"want_total_lag_before_cap"`
	WantTotalWith        *int64      `json:"want_total_lag_with_persistent"`
	WantHPAUnclamped     *int64      `json:"hpa_desired_replicas_unclamped"`
}

// Partition is one partition's offsets in a poll; Committed is nil where
// the group never committed.
type Partition struct {
	Partition int32  `json:"partition"`
	Latest    int64  `json:"latest"`
	Committed *int64 `json:"committed"`
}

// Parse reads a vector file. ok is false for a JSON file of another family
// (no polls, or no lagThreshold).
func Parse(raw []byte) (v *Vector, ok bool, err error) {
	v = &Vector{}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, false, fmt.Errorf("KEDA vector: %w", err)
	}
	_, has := v.Config["lagThreshold"]
	return v, len(v.Polls) > 0 && has, nil
}

// Metadata is the vector's configuration as KEDA kafka trigger keys, each
// value as a ScaledObject's metadata writes it, with the topic unless the
// vector reads every topic of the group. The consumer group is the
// caller's to add.
func (v *Vector) Metadata() (map[string]string, error) {
	md := map[string]string{}
	if v.Topic != "" {
		md["topic"] = v.Topic
	}
	keys := make([]string, 0, len(v.Config))
	for k := range v.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same first error every time
	for _, k := range keys {
		raw := v.Config[k]
		var val any
		if err := json.Unmarshal(raw, &val); err != nil {
			return nil, fmt.Errorf("config.%s: %w", k, err)
		}
		switch x := val.(type) {
		case nil:
		case string:
			md[k] = x
		case bool, float64:
			md[k] = strings.TrimSpace(string(raw))
		default:
			return nil, fmt.Errorf("config.%s: %s is not a string, number or boolean", k, prefix(string(raw)))
		}
	}
	return md, nil
}

// LagThreshold is the vector's lagThreshold, 0 when it has none or it is
// not a whole number.
func (v *Vector) LagThreshold() int64 {
	var n int64
	_ = json.Unmarshal(v.Config["lagThreshold"], &n)
	return n
}

// LagConfig is tidal's keda mode configured by the vector's keys, through
// the parser a ScaledObject's metadata goes through: faithful reproduces
// KEDA's numbers, faults included.
func (v *Vector) LagConfig(faithful bool) (lagconfig.Config, error) {
	md, err := v.Metadata()
	if err != nil {
		return lagconfig.Config{}, err
	}
	md["faithful"] = strconv.FormatBool(faithful)
	return lagconfig.ParseConfig(string(lagconfig.ModeKEDA), md)
}

// Partitions is one more than the highest partition any poll names: the
// topic's size on the broker.
func (v *Vector) Partitions() int32 {
	n := int32(1)
	for _, p := range v.Polls {
		for _, q := range p.Partitions {
			n = max(n, q.Partition+1)
		}
	}
	return n
}

// Offsets are the poll's offsets as the lag strategy takes them, appended
// to dst.
func (p *Poll) Offsets(dst []lag.Partition) []lag.Partition {
	for _, q := range p.Partitions {
		part := lag.Partition{ID: q.Partition, End: q.Latest}
		if q.Committed != nil {
			part.Committed, part.HasCommitted = *q.Committed, true
		}
		dst = append(dst, part)
	}
	return dst
}

func prefix(s string) string {
	const n = 64
	if len(s) > n {
		return strconv.Quote(s[:n]) + "..."
	}
	return strconv.Quote(s)
}
