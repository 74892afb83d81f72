package keda

import (
	"math"
	"testing"
)

// hpaTolerance is the HPA's default tolerance: it keeps the current replica
// count while the metric is within 10 % of the target.
const hpaTolerance = 0.1

// hpaReplicas is what the HPA's replica calculator asks for from one
// External metric with an AverageValue target (KEDA's default metric type):
// the metric total divided by the per-pod target, rounded up, unless the
// ratio of the metric to target × current replicas is within tolerance of
// 1, when it keeps current. Values are in milli-units, as KEDA publishes
// them. It leaves out what comes after (min/max, behavior) and the 0↔1 step,
// which is KEDA's. The HPA does not run at 0 replicas, so current ≥ 1.
func hpaReplicas(valueMilli, targetMilli int64, current int32) int32 {
	ratio := float64(valueMilli) / (float64(targetMilli) * float64(current))
	if math.Abs(ratio-1) <= hpaTolerance {
		return current
	}
	return int32(math.Ceil(float64(valueMilli) / float64(targetMilli)))
}

func TestHPAReplicas(t *testing.T) {
	for _, tc := range []struct {
		name          string
		value, target int64
		current, want int32
	}{
		{"at the target", 5000, 1000, 5, 5},
		{"up from 1", 5000, 1000, 1, 5},
		{"down from 9", 5000, 1000, 9, 5},
		{"fraction rounds up", 4200, 1000, 1, 5},
		{"within tolerance above keeps current", 10000, 1000, 11, 11},
		{"within tolerance below keeps current", 10000, 1000, 10, 10},
		{"just outside tolerance", 10000, 1000, 12, 10},
		{"inside tolerance above", 10500, 1000, 10, 10},
		{"lag against a threshold", 29000, 10000, 1, 3},
		{"zero metric asks for zero", 0, 1000, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hpaReplicas(tc.value, tc.target, tc.current); got != tc.want {
				t.Errorf("hpaReplicas(%d, %d, current %d) = %d, want %d", tc.value, tc.target, tc.current, got, tc.want)
			}
		})
	}
}
