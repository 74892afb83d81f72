package main

import "encoding/json"

// knativeFamilies replays ../shared/vectors/knative (issue 3): the decider
// vectors, the reconciler steps, the closed-loop e2e traces and the scrape
// sample sizes. Each file is recognised by its content.
var knativeFamilies = []family{
	{name: "knative decider", match: isKnativeDecider, replay: replayKnativeDecider},
	{name: "knative reconciler steps", match: isKnativeReconcilerSteps, replay: replayKnativeReconcilerSteps},
	{name: "knative e2e trace", match: isKnativeE2E, replay: replayKnativeE2E},
	{name: "knative sample size", match: isKnativeSampleSize, replay: replayKnativeSampleSize},
}

// hasKeys reports whether the JSON object raw has every key.
func hasKeys(raw json.RawMessage, keys ...string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

func isKnativeDecider(doc map[string]json.RawMessage) bool {
	_, ticks := doc["ticks"]
	_, records := doc["records"]
	return ticks && records && hasKeys(doc["config"], "decider_spec", "metric_stable_window_ms", "initial_ready_pods")
}

func isKnativeE2E(doc map[string]json.RawMessage) bool {
	_, events := doc["events"]
	return events && hasKeys(doc["config"], "decider_spec", "initial_deployment_replicas")
}

func isKnativeReconcilerSteps(doc map[string]json.RawMessage) bool {
	var cases []json.RawMessage
	if json.Unmarshal(doc["cases"], &cases) != nil || len(cases) == 0 {
		return false
	}
	var c struct {
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(cases[0], &c) != nil {
		return false
	}
	return hasKeys(c.Input, "pa_active_status", "decider_desired_scale", "sks_present")
}

func isKnativeSampleSize(doc map[string]json.RawMessage) bool {
	_, ss := doc["sample_size"]
	_, ex := doc["extrapolation"]
	return ss && ex
}
