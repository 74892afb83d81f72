package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/decider/kpa"
)

type knReconcileInput struct {
	ConfigAutoscalerOverrides map[string]string `json:"config_autoscaler_overrides"`
	ConfigDeploymentOverrides map[string]string `json:"config_deployment_overrides"`
	PAAnnotations             map[string]string `json:"pa_annotations"`
	ContainerConcurrency      int64             `json:"container_concurrency"`
	Reachability              string            `json:"reachability"`
	PAActiveStatus            string            `json:"pa_active_status"`
	PAActiveReason            string            `json:"pa_active_reason"`
	PAActiveConditionAgeMs    int64             `json:"pa_active_condition_age_ms"`
	ScaleTargetInitialized    bool              `json:"scale_target_initialized"`
	PAStatusServiceNameSet    bool              `json:"pa_status_service_name_set"`
	PAPriorDesiredScale       *int32            `json:"pa_prior_desired_scale"`
	SKSPresent                bool              `json:"sks_present"`
	SKSMode                   string            `json:"sks_mode"`
	SKSProxyForMs             *int64            `json:"sks_activator_endpoints_populated_for_ms"`
	ActivatorProbeResult      bool              `json:"activator_probe_result"`
	DeploymentReplicas        *int32            `json:"deployment_replicas"`
	ReadyPods                 int32             `json:"ready_pods"`
	NotReadyPods              int32             `json:"not_ready_pods"`
	DeciderDesiredScale       int32             `json:"decider_desired_scale"`
	DeciderEBC                int32             `json:"decider_excess_burst_capacity"`
	DeciderSpec               knDeciderSpec     `json:"decider_spec"`
}

type knReconcileOutput struct {
	Error                    *string `json:"error"`
	AppliedReplicas          *int32  `json:"applied_replicas"`
	RequeueAfterMs           []int64 `json:"requeue_after_ms"`
	SyncProbeCalls           int     `json:"sync_probe_calls"`
	AsyncProbeOffers         int     `json:"async_probe_offers"`
	PADesiredScale           int32   `json:"pa_desired_scale"`
	PAActualScale            int32   `json:"pa_actual_scale"`
	PAActiveStatus           string  `json:"pa_active_status"`
	PAActiveReason           string  `json:"pa_active_reason"`
	PAActiveConditionChanged *bool   `json:"pa_active_condition_changed"`
	ScaleTargetInitialized   bool    `json:"scale_target_initialized"`
	SKSMode                  string  `json:"sks_mode"`
	SKSNumActivators         int32   `json:"sks_num_activators"`
	MetricScrapeTarget       *string `json:"metric_scrape_target"`
	MetricStableWindowMs     *int64  `json:"metric_stable_window_ms"`
	MetricPanicWindowMs      *int64  `json:"metric_panic_window_ms"`
}

func reachability(s string) (kparules.Reachability, error) {
	switch s {
	case "Reachable":
		return kparules.Reachable, nil
	case "Unreachable":
		return kparules.Unreachable, nil
	case "", "Unknown":
		return kparules.ReachabilityUnknown, nil
	}
	return "", fmt.Errorf("reachability %q: want Reachable, Unreachable or Unknown", s)
}

// reconcileCase is one reconcile's inputs in vector terms.
type reconcileCase struct {
	in knReconcileInput
}

// run builds the actuator input, checks the resolved decider spec and runs
// one Reconcile.
func (c *reconcileCase) run(at string) (kparules.Result, error) {
	in := &c.in
	reach, err := reachability(in.Reachability)
	if err != nil {
		return kparules.Result{}, err
	}
	rev, err := knRevision(at, in.ConfigAutoscalerOverrides, in.ConfigDeploymentOverrides, in.PAAnnotations, in.ContainerConcurrency, reach != kparules.Unreachable)
	if err != nil {
		return kparules.Result{}, err
	}
	got := rev.DeciderSpec()
	want, err := vectorSpec(in.DeciderSpec, got.MetricStableWindow.Milliseconds(), got.MetricPanicWindow.Milliseconds(), algoName(got), got.Scraped)
	if err != nil {
		return kparules.Result{}, &mismatch{at: at, field: "decider_spec", want: "a valid spec", got: err}
	}
	if err := compareSpecs(at, want, got); err != nil {
		return kparules.Result{}, err
	}
	ain := kparules.Input{
		Revision:               rev,
		Reachability:           reach,
		Active:                 kparules.Condition{Status: kparules.ConditionStatus(in.PAActiveStatus), Reason: in.PAActiveReason},
		ActiveAge:              ms(in.PAActiveConditionAgeMs),
		ScaleTargetInitialized: in.ScaleTargetInitialized,
		ServiceNameSet:         in.PAStatusServiceNameSet,
		PriorDesiredScale:      in.PAPriorDesiredScale,
		Replicas:               in.DeploymentReplicas,
		ReadyPods:              in.ReadyPods,
		Decider:                kpa.Status{DesiredScale: in.DeciderDesiredScale, ExcessBurstCapacity: in.DeciderEBC},
	}
	if in.SKSPresent {
		s := &kparules.SKS{Mode: kparules.SKSMode(in.SKSMode), PrivateServiceNameSet: true}
		if in.SKSProxyForMs != nil {
			s.ProxyFor = ms(*in.SKSProxyForMs)
		}
		ain.SKS = s
	}
	return kparules.Reconcile(ain, func() bool { return in.ActivatorProbeResult }), nil
}

func algoName(s kpa.Spec) string { return s.Aggregation.String() }

// roundMs rounds a requeue delay to 100 ms, as the vectors record it.
func roundMs(d time.Duration) int64 { return d.Round(100 * time.Millisecond).Milliseconds() }

// checkReconcile compares a Result with the expected output fields. The e2e
// rows omit some fields; pass nil for those.
func checkReconcile(at string, r *kparules.Result, o *knReconcileOutput, checkMetric bool) error {
	mm := func(field string, want, got any) error { return &mismatch{at: at, field: field, want: want, got: got} }
	if o.Error != nil {
		return mm("error", *o.Error, "none")
	}
	switch {
	case (o.AppliedReplicas == nil) != (r.Patch == nil):
		return mm("applied_replicas", ptrStr(o.AppliedReplicas), ptrStr(r.Patch))
	case o.AppliedReplicas != nil && *o.AppliedReplicas != *r.Patch:
		return mm("applied_replicas", *o.AppliedReplicas, *r.Patch)
	}
	got := make([]int64, len(r.Requeue))
	for i, d := range r.Requeue {
		got[i] = roundMs(d)
	}
	if fmt.Sprint(got) != fmt.Sprint(append([]int64{}, o.RequeueAfterMs...)) {
		return mm("requeue_after_ms", fmt.Sprint(o.RequeueAfterMs), fmt.Sprint(got))
	}
	async := 0
	if r.AsyncProbe {
		async = 1
	}
	for _, f := range []struct {
		name      string
		want, got any
	}{
		{"sync_probe_calls", o.SyncProbeCalls, r.SyncProbes},
		{"async_probe_offers", o.AsyncProbeOffers, async},
		{"pa_desired_scale", o.PADesiredScale, r.DesiredScale},
		{"pa_actual_scale", o.PAActualScale, r.ActualScale},
		{"pa_active_status", o.PAActiveStatus, string(r.Active.Status)},
		{"pa_active_reason", o.PAActiveReason, r.Active.Reason},
		{"scale_target_initialized", o.ScaleTargetInitialized, r.ScaleTargetInitialized},
		{"sks_mode", o.SKSMode, string(r.SKSMode)},
		{"sks_num_activators", o.SKSNumActivators, r.NumActivators},
	} {
		if f.want != f.got {
			return mm(f.name, f.want, f.got)
		}
	}
	if o.PAActiveConditionChanged != nil && *o.PAActiveConditionChanged != r.ActiveChanged {
		return mm("pa_active_condition_changed", *o.PAActiveConditionChanged, r.ActiveChanged)
	}
	if !checkMetric {
		return nil
	}
	gotTarget, gotStable, gotPanic := "null", int64(0), int64(0)
	if r.Metric != nil {
		gotTarget = ""
		if r.Metric.Scraped {
			gotTarget = "rev-private"
		}
		gotStable, gotPanic = r.Metric.StableWindow.Milliseconds(), r.Metric.PanicWindow.Milliseconds()
	}
	if ptrStr(o.MetricScrapeTarget) != gotTarget {
		return mm("metric_scrape_target", ptrStr(o.MetricScrapeTarget), gotTarget)
	}
	wantStable, wantPanic := int64(0), int64(0)
	if o.MetricStableWindowMs != nil {
		wantStable = *o.MetricStableWindowMs
	}
	if o.MetricPanicWindowMs != nil {
		wantPanic = *o.MetricPanicWindowMs
	}
	if wantStable != gotStable {
		return mm("metric_stable_window_ms", wantStable, gotStable)
	}
	if wantPanic != gotPanic {
		return mm("metric_panic_window_ms", wantPanic, gotPanic)
	}
	return nil
}

func replayKnativeReconcilerSteps(raw []byte) error {
	var f struct {
		Cases []struct {
			Name   string            `json:"name"`
			Input  knReconcileInput  `json:"input"`
			Output knReconcileOutput `json:"output"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("file json - want a reconciler-steps vector got error %w", err)
	}
	for i, c := range f.Cases {
		at := fmt.Sprintf("case %d (%s)", i, c.Name)
		rc := reconcileCase{in: c.Input}
		r, err := rc.run(at)
		if err != nil {
			return err
		}
		if err := checkReconcile(at, &r, &c.Output, true); err != nil {
			return err
		}
	}
	return nil
}
