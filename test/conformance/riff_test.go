package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// riffBurstVector is a vector worked out by hand from riff's autoscaler: one
// message at tick 1 on a 1-partition topic, consumed by tick 2, idle timeout
// 1 s. The smoothed value first reaches 0 on the 14th idle tick (15), the
// last replica is held until 15*100+1000 ms, so 0 from tick 25.
func riffBurstVector(mutate func(k int, exp map[string]map[string]any)) map[string]any {
	var ticks []any
	for k := 1; k <= 30; k++ {
		desired, before := 0, 0
		if k <= 24 {
			desired = 1
		}
		if k >= 2 && k <= 25 {
			before = 1
		}
		lag, committed := 0, any(1)
		if k == 1 {
			lag, committed = 1, nil
		}
		calls := 1
		if k >= 15 && k <= 25 {
			calls = 2 // smoothed 0 at a running function: the queue is re-read
		}
		exp := map[string]map[string]any{
			"v0.0.5": {"replicas_before": before, "max_partition_lag": lag, "policy_raw": lag, "desired": desired, "scale_called": desired != before},
			"v0.0.6": {"replicas_before": before, "queue_length": lag, "queue_length_calls": calls, "desired": desired, "scale_called": desired != before},
		}
		if mutate != nil {
			mutate(k, exp)
		}
		writes := 0
		if k == 1 {
			writes = 1
		}
		ticks = append(ticks, map[string]any{
			"tick": k, "t_ms": k * 100,
			"input":  map[string]any{"partitions": []any{map[string]any{"end": 1, "committed": committed}}, "writes": writes},
			"expect": exp,
		})
	}
	return map[string]any{
		"name":     "hand-burst",
		"variants": map[string]any{"v0.0.5": map[string]any{}, "v0.0.6": map[string]any{}},
		"config": map[string]any{
			"tick_ms":               100,
			"function":              map[string]any{"name": "fn", "input": "in", "maxReplicas": nil, "idleTimeoutMs": 1000},
			"topic_resource":        map[string]any{"name": "in", "partitions": 1},
			"extra_topic_resources": []any{},
		},
		"ticks": ticks,
	}
}

func writeVector(t *testing.T, dir, name string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runDir(t *testing.T, dir string) (string, int, int) {
	t.Helper()
	var out bytes.Buffer
	passed, failed, err := run(&out, dir, families())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String(), passed, failed
}

func TestRiffReplay(t *testing.T) {
	tests := []struct {
		name     string
		vector   map[string]any
		wantPass bool
		wantLine string
	}{
		{"hand-derived burst passes", riffBurstVector(nil), true, "1 passed, 0 failed"},
		{"wrong desired fails at its tick", riffBurstVector(func(k int, exp map[string]map[string]any) {
			if k == 24 {
				exp["v0.0.6"]["desired"] = 0
			}
		}), false, "tick 24 (t_ms=2400) v0.0.6 desired want 0 got 1"},
		{"wrong policy_raw fails", riffBurstVector(func(k int, exp map[string]map[string]any) {
			if k == 1 {
				exp["v0.0.5"]["policy_raw"] = 3
			}
		}), false, "tick 1 (t_ms=100) v0.0.5 policy_raw want 3 got 1"},
		{"wrong queue_length_calls fails", riffBurstVector(func(k int, exp map[string]map[string]any) {
			if k == 15 {
				exp["v0.0.6"]["queue_length_calls"] = 1
			}
		}), false, "v0.0.6 queue_length_calls want 1 got 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeVector(t, dir, "v.json", tt.vector)
			out, passed, _ := runDir(t, dir)
			if (passed == 1) != tt.wantPass || !strings.Contains(out, tt.wantLine) {
				t.Errorf("output:\n%s\nwant pass=%v and a line containing %q", out, tt.wantPass, tt.wantLine)
			}
		})
	}
}

func TestRiffUnknownVariant(t *testing.T) {
	v := riffBurstVector(nil)
	v["variants"] = map[string]any{"v9.9.9": map[string]any{}}
	dir := t.TempDir()
	writeVector(t, dir, "v.json", v)
	out, _, failed := runDir(t, dir)
	if failed != 1 || !strings.Contains(out, "variant want a known riff version got v9.9.9") {
		t.Errorf("output:\n%s\nwant the unknown variant reported", out)
	}
}

// TestRiffInputChange: a function_update that moves the input to an empty,
// unwritten topic rebuilds v0.0.6's chain, so it proposes 0 at once
// (riff v0.0.6 drops to 0 at once), while v0.0.5 keeps its memory and holds.
func TestRiffInputChange(t *testing.T) {
	v := riffBurstVector(nil)
	ticks := v["ticks"].([]any)
	// Keep a backlog so the function runs, then switch input at tick 10.
	for k := 1; k <= 30; k++ {
		tk := ticks[k-1].(map[string]any)
		in := tk["input"].(map[string]any)
		in["partitions"] = []any{map[string]any{"end": 100 + 10*k, "committed": 10 * k}}
		in["writes"] = 10
		delete(tk, "expect")
		if k == 10 {
			in["function_update"] = map[string]any{"name": "fn", "input": "other", "maxReplicas": nil, "idleTimeoutMs": 1000}
		}
		if k >= 10 {
			in["partitions"] = []any{map[string]any{"end": 0, "committed": nil}}
			in["writes"] = 0
		}
	}
	ticks[9].(map[string]any)["expect"] = map[string]any{
		"v0.0.6": map[string]any{"replicas_before": 1, "desired": 0, "queue_length": 0, "queue_length_calls": 2, "scale_called": true},
		"v0.0.5": map[string]any{"replicas_before": 1, "desired": 1, "max_partition_lag": 0, "policy_raw": 0, "scale_called": false},
	}
	v["config"].(map[string]any)["extra_topic_resources"] = []any{map[string]any{"name": "other", "partitions": 2}}
	dir := t.TempDir()
	writeVector(t, dir, "v.json", v)
	if out, passed, _ := runDir(t, dir); passed != 1 {
		t.Errorf("output:\n%s\nwant the input change replayed", out)
	}
}
