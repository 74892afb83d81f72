package main

import (
	"strings"
	"testing"
)

// kedaPersistentVector is worked out by hand from the KEDA README rules:
// excludePersistentLag remembers each partition's committed offset across
// polls; an unmoved one counts for activation only.
func kedaPersistentVector(metric2 float64) map[string]any {
	return map[string]any{
		"name": "hand-persistent", "topic": "t",
		"config": map[string]any{
			"lagThreshold": 100, "activationLagThreshold": 0, "offsetResetPolicy": "latest",
			"allowIdleConsumers": false, "scaleToZeroOnInvalidOffset": false,
			"excludePersistentLag": true, "limitToPartitionsWithLag": false,
		},
		"polls": []any{
			map[string]any{
				"partitions": []any{
					map[string]any{"partition": 0, "latest": 100, "committed": 10},
					map[string]any{"partition": 1, "latest": 200, "committed": 150},
					map[string]any{"partition": 2, "latest": 7, "committed": nil},
				},
				"want_metric_value": 141, "want_metric_milli_value": 141000, "want_active": true,
				"want_per_partition_lag": []int{90, 50, 1}, "want_per_partition_lag_with_persistent": []int{90, 50, 1},
				"want_total_lag_before_cap": 141, "want_total_lag_with_persistent": 141, "hpa_desired_replicas_unclamped": 2,
			},
			map[string]any{
				"partitions": []any{
					map[string]any{"partition": 0, "latest": 120, "committed": 10},
					map[string]any{"partition": 1, "latest": 260, "committed": 200},
					map[string]any{"partition": 2, "latest": 9, "committed": nil},
				},
				"want_metric_value": metric2, "want_metric_milli_value": metric2 * 1000, "want_active": true,
				"want_per_partition_lag": []int{0, 60, 1}, "want_per_partition_lag_with_persistent": []int{110, 60, 1},
				"want_total_lag_before_cap": 61, "want_total_lag_with_persistent": 171, "hpa_desired_replicas_unclamped": 1,
			},
		},
	}
}

func TestKEDAReplay(t *testing.T) {
	dir := t.TempDir()
	writeVector(t, dir, "good.json", kedaPersistentVector(61))
	writeVector(t, dir, "bad.json", kedaPersistentVector(171))
	out, passed, failed := runDir(t, dir)
	if passed != 1 || failed != 1 || !strings.Contains(out, "poll 2 want_metric_value want 171 got 61") ||
		!strings.HasSuffix(out, "1 passed, 1 failed\n") {
		t.Errorf("output:\n%s\nwant good.json to pass and bad.json to fail at poll 2", out)
	}
}
