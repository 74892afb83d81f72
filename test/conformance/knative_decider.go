package main

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/decider/window"
)

// knDeciderSpec is a vector's resolved DeciderSpec.
type knDeciderSpec struct {
	MaxScaleUpRate      float64 `json:"max_scale_up_rate"`
	MaxScaleDownRate    float64 `json:"max_scale_down_rate"`
	ScalingMetric       string  `json:"scaling_metric"`
	TargetValue         float64 `json:"target_value"`
	TotalValue          float64 `json:"total_value"`
	TargetBurstCapacity float64 `json:"target_burst_capacity"`
	ActivatorCapacity   float64 `json:"activator_capacity"`
	PanicThreshold      float64 `json:"panic_threshold"`
	StableWindowMs      int64   `json:"stable_window_ms"`
	ScaleDownDelayMs    int64   `json:"scale_down_delay_ms"`
	InitialScale        int32   `json:"initial_scale"`
	Reachable           bool    `json:"reachable"`
	ActivationScale     int32   `json:"activation_scale"`
}

type knStat struct {
	AverageConcurrentRequests        float64 `json:"average_concurrent_requests"`
	AverageProxiedConcurrentRequests float64 `json:"average_proxied_concurrent_requests"`
	RequestCount                     float64 `json:"request_count"`
	ProxiedRequestCount              float64 `json:"proxied_request_count"`
}

func (s knStat) stat() kpa.Stat {
	return kpa.Stat{
		AverageConcurrentRequests:        s.AverageConcurrentRequests,
		AverageProxiedConcurrentRequests: s.AverageProxiedConcurrentRequests,
		RequestCount:                     s.RequestCount,
		ProxiedRequestCount:              s.ProxiedRequestCount,
	}
}

type knRecord struct {
	TMs        int64  `json:"t_ms"`
	RecordAtMs int64  `json:"record_at_ms"`
	Source     string `json:"source"`
	Stat       knStat `json:"stat"`
}

// knTick is a tick or poke row; the e2e traces use the same fields.
type knTick struct {
	TMs                        int64    `json:"t_ms"`
	Kind                       string   `json:"kind"`
	Event                      string   `json:"event"`
	ReadyPods                  int32    `json:"ready_pods"`
	MetricError                *string  `json:"metric_error"`
	ObservedStable             *float64 `json:"observed_stable"`
	ObservedPanic              *float64 `json:"observed_panic"`
	ScaleValid                 bool     `json:"scale_valid"`
	WantDesired                *int32   `json:"want_desired"`
	WantExcessBurstCapacity    *int32   `json:"want_excess_burst_capacity"`
	WantPanicking              bool     `json:"want_panicking"`
	MaxPanicPods               *int32   `json:"max_panic_pods"`
	DeciderDesiredScale        *int32   `json:"decider_desired_scale"`
	DeciderExcessBurstCapacity *int32   `json:"decider_excess_burst_capacity"`
	Informed                   *bool    `json:"informed"`
}

type knSpecUpdate struct {
	TMs                  int64             `json:"t_ms"`
	PAAnnotations        map[string]string `json:"pa_annotations"`
	DeciderSpec          knDeciderSpec     `json:"decider_spec"`
	MetricStableWindowMs int64             `json:"metric_stable_window_ms"`
	MetricPanicWindowMs  int64             `json:"metric_panic_window_ms"`
}

type knDeciderConfig struct {
	ConfigAutoscalerOverrides map[string]string `json:"config_autoscaler_overrides"`
	PAAnnotations             map[string]string `json:"pa_annotations"`
	ContainerConcurrency      int64             `json:"container_concurrency"`
	Reachable                 bool              `json:"reachable"`
	DeciderSpec               knDeciderSpec     `json:"decider_spec"`
	MetricStableWindowMs      int64             `json:"metric_stable_window_ms"`
	MetricPanicWindowMs       int64             `json:"metric_panic_window_ms"`
	ScrapeTargetSet           bool              `json:"scrape_target_set"`
	AggregationAlgorithm      string            `json:"aggregation_algorithm"`
	InitialReadyPods          int32             `json:"initial_ready_pods"`
	InitialDesired            int32             `json:"initial_decider_desired_scale"`
	InitialEBC                int32             `json:"initial_decider_excess_burst_capacity"`
	EpochUnixS                int64             `json:"epoch_unix_s"`
}

type knDeciderFile struct {
	Config      knDeciderConfig `json:"config"`
	SpecUpdates []knSpecUpdate  `json:"spec_updates"`
	Records     []knRecord      `json:"records"`
	Ticks       []knTick        `json:"ticks"`
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// vectorSpec converts a vector's resolved decider spec and metric windows.
func vectorSpec(ds knDeciderSpec, stableMs, panicMs int64, algo string, scraped bool) (kpa.Spec, error) {
	s := kpa.Spec{
		TargetValue:         ds.TargetValue,
		TotalValue:          ds.TotalValue,
		TargetBurstCapacity: ds.TargetBurstCapacity,
		PanicThreshold:      ds.PanicThreshold,
		MaxScaleUpRate:      ds.MaxScaleUpRate,
		MaxScaleDownRate:    ds.MaxScaleDownRate,
		StableWindow:        ms(ds.StableWindowMs),
		ScaleDownDelay:      ms(ds.ScaleDownDelayMs),
		ActivationScale:     ds.ActivationScale,
		InitialScale:        ds.InitialScale,
		Reachable:           ds.Reachable,
		ActivatorCapacity:   ds.ActivatorCapacity,
		MetricStableWindow:  ms(stableMs),
		MetricPanicWindow:   ms(panicMs),
		Scraped:             scraped,
	}
	switch ds.ScalingMetric {
	case "rps":
		s.ScalingMetric = kpa.RPS
	case "concurrency", "":
		s.ScalingMetric = kpa.Concurrency
	default:
		return s, fmt.Errorf("scaling_metric %q: want concurrency or rps", ds.ScalingMetric)
	}
	switch algo {
	case "", "linear":
		s.Aggregation = window.Linear
	case "weighted-exponential", "weightedExponential":
		s.Aggregation = window.WeightedExponential
	default:
		return s, fmt.Errorf("aggregation_algorithm %q: unknown", algo)
	}
	return s, s.Validate()
}

// floatsEqual compares observed averages; Knative's and tidal's arithmetic
// agree to the bit, the tolerance only absorbs the JSON round trip.
func floatsEqual(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func ptrStr[T any](p *T) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// checkTick compares one Scale result (and the decider status after it) with
// a tick or poke row. withInternals adds the fields only decider vectors have.
func checkTick(at string, row *knTick, d *kpa.Decision, st kpa.Status, informed bool, withInternals bool) error {
	mm := func(field string, want, got any) error {
		return &mismatch{at: at, field: field, want: want, got: got}
	}
	if row.ScaleValid != d.Valid() {
		return mm("scale_valid", row.ScaleValid, d.Valid())
	}
	if d.Valid() {
		if row.MetricError != nil {
			return mm("metric_error", *row.MetricError, "null")
		}
		if row.ObservedStable == nil || !floatsEqual(*row.ObservedStable, d.ObservedStable) {
			return mm("observed_stable", ptrStr(row.ObservedStable), d.ObservedStable)
		}
		if row.ObservedPanic == nil || !floatsEqual(*row.ObservedPanic, d.ObservedPanic) {
			return mm("observed_panic", ptrStr(row.ObservedPanic), d.ObservedPanic)
		}
		if row.WantDesired == nil || *row.WantDesired != d.Desired {
			return mm("want_desired", ptrStr(row.WantDesired), d.Desired)
		}
		if row.WantExcessBurstCapacity == nil || *row.WantExcessBurstCapacity != d.ExcessBurstCapacity {
			return mm("want_excess_burst_capacity", ptrStr(row.WantExcessBurstCapacity), d.ExcessBurstCapacity)
		}
	} else {
		if row.MetricError == nil || *row.MetricError != d.Invalid.String() {
			return mm("metric_error", ptrStr(row.MetricError), d.Invalid.String())
		}
	}
	if row.WantPanicking != d.Panicking {
		return mm("want_panicking", row.WantPanicking, d.Panicking)
	}
	if withInternals && (row.MaxPanicPods == nil || *row.MaxPanicPods != d.MaxPanicPods) {
		return mm("max_panic_pods", ptrStr(row.MaxPanicPods), d.MaxPanicPods)
	}
	if row.DeciderDesiredScale == nil || *row.DeciderDesiredScale != st.DesiredScale {
		return mm("decider_desired_scale", ptrStr(row.DeciderDesiredScale), st.DesiredScale)
	}
	if row.DeciderExcessBurstCapacity == nil || *row.DeciderExcessBurstCapacity != st.ExcessBurstCapacity {
		return mm("decider_excess_burst_capacity", ptrStr(row.DeciderExcessBurstCapacity), st.ExcessBurstCapacity)
	}
	if withInternals && row.Informed != nil && *row.Informed != informed {
		return mm("informed", *row.Informed, informed)
	}
	return nil
}

func source(s string) (kpa.Source, error) {
	switch s {
	case "activator":
		return kpa.SourceActivator, nil
	case "scraper":
		return kpa.SourceScraper, nil
	}
	return 0, fmt.Errorf("record source %q: want activator or scraper", s)
}

func replayKnativeDecider(raw []byte) error {
	var f knDeciderFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("file json - want a decider vector got error %w", err)
	}
	c := &f.Config
	epoch := time.Unix(c.EpochUnixS, 0)
	at := func(tms int64) time.Time { return epoch.Add(ms(tms)) }

	spec, err := vectorSpec(c.DeciderSpec, c.MetricStableWindowMs, c.MetricPanicWindowMs, c.AggregationAlgorithm, c.ScrapeTargetSet)
	if err != nil {
		return &mismatch{at: "config", field: "decider_spec", want: "a valid spec", got: err}
	}
	if err := checkResolvedSpec("config", c.ConfigAutoscalerOverrides, c.PAAnnotations, c.ContainerConcurrency, c.Reachable, spec); err != nil {
		return err
	}
	a, err := kpa.New(spec, at(0), c.InitialReadyPods)
	if err != nil {
		return &mismatch{at: "t_ms=0", field: "create", want: "ok", got: err}
	}
	if st := a.Status(); st.DesiredScale != c.InitialDesired || st.ExcessBurstCapacity != c.InitialEBC {
		return &mismatch{at: "t_ms=0", field: "initial decider status", want: fmt.Sprintf("%d/%d", c.InitialDesired, c.InitialEBC), got: fmt.Sprintf("%d/%d", st.DesiredScale, st.ExcessBurstCapacity)}
	}

	// Merge by t_ms: spec updates, then records, then ticks. Poke rows are
	// not driven: a record must trigger each of them.
	type ev struct {
		tms   int64
		order int
		i     int
	}
	var evs []ev
	for i, u := range f.SpecUpdates {
		evs = append(evs, ev{u.TMs, 0, i})
	}
	for i, r := range f.Records {
		evs = append(evs, ev{r.TMs, 1, i})
	}
	pokes := map[int64][]int{}
	for i, t := range f.Ticks {
		switch t.Kind {
		case "tick":
			evs = append(evs, ev{t.TMs, 2, i})
		case "poke":
			pokes[t.TMs] = append(pokes[t.TMs], i)
		default:
			return &mismatch{at: fmt.Sprintf("t_ms=%d", t.TMs), field: "kind", want: "tick or poke", got: t.Kind}
		}
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].tms != evs[j].tms {
			return evs[i].tms < evs[j].tms
		}
		return evs[i].order < evs[j].order
	})

	for _, e := range evs {
		where := fmt.Sprintf("t_ms=%d", e.tms)
		switch e.order {
		case 0:
			// The update's algorithm and scrape target follow its annotations.
			u := f.SpecUpdates[e.i]
			rev, err := knRevision(where+" spec_update", c.ConfigAutoscalerOverrides, nil, u.PAAnnotations, c.ContainerConcurrency, c.Reachable)
			if err != nil {
				return err
			}
			ns := rev.DeciderSpec()
			want, err := vectorSpec(u.DeciderSpec, u.MetricStableWindowMs, u.MetricPanicWindowMs, algoName(ns), ns.Scraped)
			if err != nil {
				return &mismatch{at: where, field: "spec_update", want: "a valid spec", got: err}
			}
			if err := compareSpecs(where+" spec_update", want, ns); err != nil {
				return err
			}
			if err := a.Update(ns, at(e.tms)); err != nil {
				return &mismatch{at: where, field: "spec_update", want: "ok", got: err}
			}
		case 1:
			r := f.Records[e.i]
			src, err := source(r.Source)
			if err != nil {
				return err
			}
			poke, _, err := a.Record(at(r.RecordAtMs), at(r.TMs), r.Stat.stat(), src)
			if err != nil {
				return &mismatch{at: where, field: "record", want: "accepted", got: err}
			}
			if !poke {
				continue
			}
			q := pokes[r.TMs]
			if len(q) == 0 {
				return &mismatch{at: where, field: "kind", want: "no poke", got: "poke"}
			}
			row := &f.Ticks[q[0]]
			pokes[r.TMs] = q[1:]
			d, informed := a.Scale(at(row.TMs), row.ReadyPods, kpa.TriggerPoke)
			if err := checkTick(where+" poke", row, &d, a.Status(), informed, true); err != nil {
				return err
			}
		case 2:
			row := &f.Ticks[e.i]
			d, informed := a.Scale(at(row.TMs), row.ReadyPods, kpa.TriggerTick)
			if err := checkTick(where, row, &d, a.Status(), informed, true); err != nil {
				return err
			}
		}
	}
	for tms, q := range pokes {
		if len(q) > 0 {
			return &mismatch{at: fmt.Sprintf("t_ms=%d", tms), field: "kind", want: "poke", got: "no poke"}
		}
	}
	return nil
}
