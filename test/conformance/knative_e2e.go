package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
)

type knE2EConfig struct {
	ConfigAutoscalerOverrides map[string]string `json:"config_autoscaler_overrides"`
	ConfigDeploymentOverrides map[string]string `json:"config_deployment_overrides"`
	PAAnnotations             map[string]string `json:"pa_annotations"`
	ContainerConcurrency      int64             `json:"container_concurrency"`
	Reachability              string            `json:"reachability"`
	DeciderSpec               knDeciderSpec     `json:"decider_spec"`
	EpochUnixS                int64             `json:"epoch_unix_s"`
	InitialDeploymentReplicas int32             `json:"initial_deployment_replicas"`
}

// knE2EEvent is a tick, poke or reconcile row of a closed-loop trace.
type knE2EEvent struct {
	knTick
	DeploymentReplicas int32  `json:"deployment_replicas"`
	NotReadyPods       int32  `json:"not_ready_pods"`
	InActiveStatus     string `json:"in_pa_active_status"`
	InActiveReason     string `json:"in_pa_active_reason"`
	InActiveAgeMs      int64  `json:"in_pa_active_condition_age_ms"`
	InInitialized      bool   `json:"in_scale_target_initialized"`
	InSKSMode          string `json:"in_sks_mode"`
	InSKSPopulated     bool   `json:"in_sks_activator_endpoints_populated"`
	InSKSAgeMs         int64  `json:"in_sks_activator_endpoints_age_ms"`

	AppliedReplicas  *int32  `json:"applied_replicas"`
	RequeueAfterMs   []int64 `json:"requeue_after_ms"`
	SyncProbeCalls   int     `json:"sync_probe_calls"`
	AsyncProbeOffers int     `json:"async_probe_offers"`
	PADesiredScale   int32   `json:"pa_desired_scale"`
	PAActualScale    int32   `json:"pa_actual_scale"`
	PAActiveStatus   string  `json:"pa_active_status"`
	PAActiveReason   string  `json:"pa_active_reason"`
	Initialized      bool    `json:"scale_target_initialized"`
	SKSMode          string  `json:"sks_mode"`
	SKSNumActivators int32   `json:"sks_num_activators"`
}

func replayKnativeE2E(raw []byte) error {
	var f struct {
		Config  knE2EConfig  `json:"config"`
		Records []knRecord   `json:"records"`
		Events  []knE2EEvent `json:"events"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("file json - want an e2e trace got error %w", err)
	}
	c := &f.Config
	epoch := time.Unix(c.EpochUnixS, 0)
	at := func(tms int64) time.Time { return epoch.Add(ms(tms)) }

	reach, err := reachability(c.Reachability)
	if err != nil {
		return err
	}
	rev, err := knRevision("config", c.ConfigAutoscalerOverrides, c.ConfigDeploymentOverrides, c.PAAnnotations, c.ContainerConcurrency, reach != "Unreachable")
	if err != nil {
		return err
	}
	spec := rev.DeciderSpec()
	want, err := vectorSpec(c.DeciderSpec, spec.MetricStableWindow.Milliseconds(), spec.MetricPanicWindow.Milliseconds(), algoName(spec), spec.Scraped)
	if err != nil {
		return &mismatch{at: "config", field: "decider_spec", want: "a valid spec", got: err}
	}
	if err := compareSpecs("config", want, spec); err != nil {
		return err
	}

	// Records sort before events at the same t_ms; events keep file order.
	type ev struct {
		tms    int64
		record bool
		i      int
	}
	var evs []ev
	for i, r := range f.Records {
		evs = append(evs, ev{r.TMs, true, i})
	}
	for i, e := range f.Events {
		evs = append(evs, ev{e.TMs, false, i})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].tms != evs[j].tms {
			return evs[i].tms < evs[j].tms
		}
		return evs[i].record && !evs[j].record
	})

	var (
		a        *kpa.Autoscaler
		pending  []knRecord // records before the decider exists
		consumed = map[int]bool{}
		replicas = c.InitialDeploymentReplicas
		prior    *int32
	)
	create := func(tms int64, ready int32) error {
		var err error
		if a, err = kpa.New(spec, at(tms), ready); err != nil {
			return &mismatch{at: fmt.Sprintf("t_ms=%d", tms), field: "create", want: "ok", got: err}
		}
		for _, r := range pending {
			src, _ := source(r.Source)
			if _, _, err := a.Record(at(r.RecordAtMs), at(tms), r.Stat.stat(), src); err != nil {
				return &mismatch{at: fmt.Sprintf("t_ms=%d", r.TMs), field: "record", want: "accepted", got: err}
			}
		}
		pending = nil
		return nil
	}
	nextPoke := func(tms int64) int {
		for j := range f.Events {
			if f.Events[j].TMs == tms && f.Events[j].Event == "poke" && !consumed[j] {
				return j
			}
		}
		return -1
	}

	for _, e := range evs {
		where := fmt.Sprintf("t_ms=%d", e.tms)
		if e.record {
			r := f.Records[e.i]
			src, err := source(r.Source)
			if err != nil {
				return err
			}
			if a == nil {
				pending = append(pending, r)
				continue
			}
			poke, _, err := a.Record(at(r.RecordAtMs), at(r.TMs), r.Stat.stat(), src)
			if err != nil {
				return &mismatch{at: where, field: "record", want: "accepted", got: err}
			}
			if !poke {
				continue
			}
			j := nextPoke(r.TMs)
			if j < 0 {
				return &mismatch{at: where, field: "event", want: "no poke", got: "poke"}
			}
			consumed[j] = true
			row := &f.Events[j]
			d, informed := a.Scale(at(row.TMs), row.ReadyPods, kpa.TriggerPoke)
			if err := checkTick(where+" poke", &row.knTick, &d, a.Status(), informed, false); err != nil {
				return err
			}
			replicas = row.DeploymentReplicas
			continue
		}

		row := &f.Events[e.i]
		if a == nil && row.DeciderDesiredScale != nil {
			if err := create(row.TMs, row.ReadyPods); err != nil {
				return err
			}
		}
		switch row.Event {
		case "tick":
			if a == nil {
				return &mismatch{at: where, field: "event", want: "a decider", got: "tick before any decider status"}
			}
			d, informed := a.Scale(at(row.TMs), row.ReadyPods, kpa.TriggerTick)
			if err := checkTick(where, &row.knTick, &d, a.Status(), informed, false); err != nil {
				return err
			}
		case "poke":
			if !consumed[e.i] {
				return &mismatch{at: where, field: "event", want: "poke", got: "no poke"}
			}
		case "reconcile":
			if a != nil && row.DeciderDesiredScale != nil {
				st := a.Status()
				if st.DesiredScale != *row.DeciderDesiredScale || row.DeciderExcessBurstCapacity == nil || st.ExcessBurstCapacity != *row.DeciderExcessBurstCapacity {
					return &mismatch{at: where + " reconcile", field: "decider status", want: fmt.Sprintf("%s/%s", ptrStr(row.DeciderDesiredScale), ptrStr(row.DeciderExcessBurstCapacity)), got: fmt.Sprintf("%d/%d", st.DesiredScale, st.ExcessBurstCapacity)}
				}
			}
			if err := replayE2EReconcile(where+" reconcile", c, row, replicas, prior); err != nil {
				return err
			}
			p := row.PADesiredScale
			prior = &p
		default:
			return &mismatch{at: where, field: "event", want: "tick, poke or reconcile", got: row.Event}
		}
		replicas = row.DeploymentReplicas
	}
	return nil
}

// replayE2EReconcile runs one reconcile row like a reconciler step.
func replayE2EReconcile(at string, c *knE2EConfig, row *knE2EEvent, replicas int32, prior *int32) error {
	rc := reconcileCase{in: knReconcileInput{
		ConfigAutoscalerOverrides: c.ConfigAutoscalerOverrides,
		ConfigDeploymentOverrides: c.ConfigDeploymentOverrides,
		PAAnnotations:             c.PAAnnotations,
		ContainerConcurrency:      c.ContainerConcurrency,
		Reachability:              c.Reachability,
		PAActiveStatus:            row.InActiveStatus,
		PAActiveReason:            row.InActiveReason,
		PAActiveConditionAgeMs:    row.InActiveAgeMs,
		ScaleTargetInitialized:    row.InInitialized,
		PAStatusServiceNameSet:    row.InSKSMode != "",
		PAPriorDesiredScale:       prior,
		SKSPresent:                row.InSKSMode != "",
		SKSMode:                   row.InSKSMode,
		ActivatorProbeResult:      row.InSKSPopulated,
		DeploymentReplicas:        &replicas,
		ReadyPods:                 row.ReadyPods,
		NotReadyPods:              row.NotReadyPods,
		DeciderDesiredScale:       kpa.ScaleUnknown,
		DeciderSpec:               c.DeciderSpec,
	}}
	if row.InSKSPopulated {
		age := row.InSKSAgeMs
		rc.in.SKSProxyForMs = &age
	}
	if row.DeciderDesiredScale != nil {
		rc.in.DeciderDesiredScale = *row.DeciderDesiredScale
	}
	if row.DeciderExcessBurstCapacity != nil {
		rc.in.DeciderEBC = *row.DeciderExcessBurstCapacity
	}
	r, err := rc.run(at)
	if err != nil {
		return err
	}
	out := knReconcileOutput{
		AppliedReplicas:        row.AppliedReplicas,
		RequeueAfterMs:         row.RequeueAfterMs,
		SyncProbeCalls:         row.SyncProbeCalls,
		AsyncProbeOffers:       row.AsyncProbeOffers,
		PADesiredScale:         row.PADesiredScale,
		PAActualScale:          row.PAActualScale,
		PAActiveStatus:         row.PAActiveStatus,
		PAActiveReason:         row.PAActiveReason,
		ScaleTargetInitialized: row.Initialized,
		SKSMode:                row.SKSMode,
		SKSNumActivators:       row.SKSNumActivators,
	}
	return checkReconcile(at, &r, &out, false)
}
