package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const knativeVectors = "../../../shared/vectors/knative"

func vectorsOrSkip(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(knativeVectors); err != nil {
		t.Skipf("no Knative vectors at %s", knativeVectors)
	}
}

func TestKnativeVectorsPass(t *testing.T) {
	vectorsOrSkip(t)
	var out bytes.Buffer
	passed, failed, err := run(&out, knativeVectors, knativeFamilies)
	if err != nil {
		t.Fatal(err)
	}
	if failed != 0 || passed == 0 {
		t.Errorf("%d passed, %d failed:\n%s", passed, failed, out.String())
	}
}

// corrupt loads a vector, applies edit to its decoded JSON and replays it.
func corrupt(t *testing.T, name string, edit func(doc map[string]any)) error {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(knativeVectors, name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	raw, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return replayFile(p, knativeFamilies)
}

func row(doc map[string]any, list string, i int) map[string]any {
	return doc[list].([]any)[i].(map[string]any)
}

// TestKnativeReplayDetectsMismatches proves each family can fail, and names
// the tick or case and the field.
func TestKnativeReplayDetectsMismatches(t *testing.T) {
	vectorsOrSkip(t)
	tests := []struct {
		name, file string
		edit       func(map[string]any)
		want       string
	}{
		{"decider desired", "steady_load.json", func(d map[string]any) { row(d, "ticks", 3)["want_desired"] = 9 }, "t_ms=8000 want_desired want 9 got 3"},
		{"decider observed", "steady_load.json", func(d map[string]any) { row(d, "ticks", 0)["observed_stable"] = 20.5 }, "observed_stable"},
		{"decider informed", "steady_load.json", func(d map[string]any) { row(d, "ticks", 1)["informed"] = true }, "informed"},
		{"decider spec", "steady_load.json", func(d map[string]any) {
			d["config"].(map[string]any)["decider_spec"].(map[string]any)["target_value"] = 8
		}, "decider_spec.target_value"},
		{"unlisted poke", "scale_from_zero_poke.json", func(d map[string]any) {
			var keep []any
			for _, r := range d["ticks"].([]any) {
				if r.(map[string]any)["kind"] != "poke" {
					keep = append(keep, r)
				}
			}
			d["ticks"] = keep
		}, "kind want no poke got poke"},
		{"reconciler", "reconciler_steps.json", func(d map[string]any) {
			row(d, "cases", 0)["output"].(map[string]any)["sks_num_activators"] = 5
		}, "case 0 (apply_desired_within_bounds) sks_num_activators want 5 got 6"},
		{"e2e reconcile", "e2e_scale_from_zero.json", func(d map[string]any) {
			for _, e := range d["events"].([]any) {
				if m := e.(map[string]any); m["event"] == "reconcile" && m["t_ms"] == 130000.0 {
					m["applied_replicas"] = nil
				}
			}
		}, "t_ms=130000 reconcile applied_replicas"},
		{"sample size", "scrape_sample_size.json", func(d map[string]any) { row(d, "sample_size", 10)["sample_size"] = 8 }, "population 10 sample_size want 8 got 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := corrupt(t, tt.file, tt.edit)
			var m *mismatch
			if !errors.As(err, &m) {
				t.Fatalf("replay = %v, want a mismatch", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("mismatch %q, want it to contain %q", err, tt.want)
			}
		})
	}
}
