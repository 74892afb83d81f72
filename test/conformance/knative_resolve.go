package main

import (
	"fmt"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// knRevision parses a vector's config-autoscaler and config-deployment
// overrides and annotations the way tidal would read them from the cluster.
func knRevision(at string, cfgOverrides, depOverrides, ann map[string]string, cc int64, reachable bool) (kpaconfig.Revision, error) {
	cfg, err := kpaconfig.ParseConfig(cfgOverrides)
	if err != nil {
		return kpaconfig.Revision{}, &mismatch{at: at, field: "config_autoscaler_overrides", want: "valid", got: err}
	}
	dep, err := kpaconfig.ParseDeploymentConfig(depOverrides)
	if err != nil {
		return kpaconfig.Revision{}, &mismatch{at: at, field: "config_deployment_overrides", want: "valid", got: err}
	}
	rev, err := kpaconfig.NewRevision(cfg, dep, ann, cc, reachable)
	if err != nil {
		return kpaconfig.Revision{}, &mismatch{at: at, field: "pa_annotations", want: "valid", got: err}
	}
	return rev, nil
}

// checkResolvedSpec resolves the spec from the vector's config and
// annotations with kpaconfig and compares it with the spec Knative resolved.
func checkResolvedSpec(at string, cfg, ann map[string]string, cc int64, reachable bool, want kpa.Spec) error {
	rev, err := knRevision(at, cfg, nil, ann, cc, reachable)
	if err != nil {
		return err
	}
	return compareSpecs(at, want, rev.DeciderSpec())
}

func compareSpecs(at string, want, got kpa.Spec) error {
	for _, f := range []struct {
		name      string
		want, got any
	}{
		{"scaling_metric", want.ScalingMetric, got.ScalingMetric},
		{"target_value", want.TargetValue, got.TargetValue},
		{"total_value", want.TotalValue, got.TotalValue},
		{"target_burst_capacity", want.TargetBurstCapacity, got.TargetBurstCapacity},
		{"panic_threshold", want.PanicThreshold, got.PanicThreshold},
		{"max_scale_up_rate", want.MaxScaleUpRate, got.MaxScaleUpRate},
		{"max_scale_down_rate", want.MaxScaleDownRate, got.MaxScaleDownRate},
		{"stable_window", want.StableWindow, got.StableWindow},
		{"scale_down_delay", want.ScaleDownDelay, got.ScaleDownDelay},
		{"activation_scale", want.ActivationScale, got.ActivationScale},
		{"initial_scale", want.InitialScale, got.InitialScale},
		{"reachable", want.Reachable, got.Reachable},
		{"activator_capacity", want.ActivatorCapacity, got.ActivatorCapacity},
		{"metric_stable_window", want.MetricStableWindow, got.MetricStableWindow},
		{"metric_panic_window", want.MetricPanicWindow, got.MetricPanicWindow},
		{"aggregation_algorithm", want.Aggregation, got.Aggregation},
		{"scrape_target_set", want.Scraped, got.Scraped},
	} {
		if f.want != f.got {
			return &mismatch{at: at, field: "decider_spec." + f.name, want: fmt.Sprint(f.want), got: fmt.Sprint(f.got)}
		}
	}
	return nil
}
