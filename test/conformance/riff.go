package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// riffFamilies replays ../shared/vectors/riff: riff's function controller
// run tick by tick (README there). Each variant is replayed on its own
// through the faithful mode of the algorithm that version shipped.
var riffFamilies = []family{{
	name: "riff",
	match: func(doc map[string]json.RawMessage) bool {
		_, ticks := doc["ticks"]
		_, variants := doc["variants"]
		return ticks && variants
	},
	replay: replayRiff,
}}

type riffVector struct {
	Variants map[string]json.RawMessage `json:"variants"`
	Config   struct {
		TickMs              int64        `json:"tick_ms"`
		Function            riffFunction `json:"function"`
		TopicResource       *riffTopic   `json:"topic_resource"`
		ExtraTopicResources []riffTopic  `json:"extra_topic_resources"`
	} `json:"config"`
	Ticks []riffTick `json:"ticks"`
}

type riffFunction struct {
	Name          string `json:"name"`
	Input         string `json:"input"`
	MaxReplicas   *int32 `json:"maxReplicas"`
	IdleTimeoutMs *int64 `json:"idleTimeoutMs"`
}

type riffTopic struct {
	Name       string `json:"name"`
	Partitions *int32 `json:"partitions"`
}

type riffTick struct {
	Tick  int   `json:"tick"`
	TMs   int64 `json:"t_ms"`
	Input struct {
		Partitions []struct {
			End       int64  `json:"end"`
			Committed *int64 `json:"committed"`
		} `json:"partitions"`
		Writes           *int64        `json:"writes"`
		ObservedReplicas *int32        `json:"observed_replicas"`
		InspectorError   bool          `json:"inspector_error"`
		FunctionUpdate   *riffFunction `json:"function_update"`
	} `json:"input"`
	Expect map[string]riffExpect `json:"expect"`
}

type riffExpect struct {
	ReplicasBefore   *int32 `json:"replicas_before"`
	Desired          *int32 `json:"desired"`
	ScaleCalled      *bool  `json:"scale_called"`
	QueueLength      *int64 `json:"queue_length"`
	QueueLengthCalls *int8  `json:"queue_length_calls"`
	MaxPartitionLag  *int64 `json:"max_partition_lag"`
	PolicyRaw        *int32 `json:"policy_raw"`
}

// riffModes maps a riff version to the algorithm it shipped (riff-offset until v0.0.5, riff-queue from v0.0.6).
var riffModes = map[string]lagconfig.Mode{
	"v0.0.3": lagconfig.ModeRiffOffset, "v0.0.4": lagconfig.ModeRiffOffset, "v0.0.5": lagconfig.ModeRiffOffset,
	"v0.0.6": lagconfig.ModeRiffQueue, "v0.0.7": lagconfig.ModeRiffQueue, "v0.0.x": lagconfig.ModeRiffQueue,
}

func replayRiff(raw []byte) error {
	var v riffVector
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("file json - want a riff vector got error %w", err)
	}
	if len(v.Variants) == 0 {
		return &mismatch{at: "file", field: "variants", want: "at least one", got: 0}
	}
	names := make([]string, 0, len(v.Variants))
	for name := range v.Variants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		mode, ok := riffModes[name]
		if !ok {
			return &mismatch{at: "variants", field: "variant", want: "a known riff version", got: name}
		}
		if err := replayRiffVariant(&v, name, mode); err != nil {
			return err
		}
	}
	return nil
}

// riffConfig translates a Function spec and the Topic resources into a
// faithful Config, applying riff's CRD defaults as its informer handlers did.
func riffConfig(v *riffVector, mode lagconfig.Mode, fn riffFunction) (lagconfig.Config, error) {
	c := lagconfig.DefaultConfig(mode)
	c.Faithful = true
	c.Topic = fn.Input
	c.TickInterval = time.Duration(v.Config.TickMs) * time.Millisecond
	if fn.IdleTimeoutMs != nil {
		c.IdleTimeout = time.Duration(*fn.IdleTimeoutMs) * time.Millisecond
	}
	if fn.MaxReplicas != nil {
		c.MaxReplicas = *fn.MaxReplicas
	}
	topics := v.Config.ExtraTopicResources
	if v.Config.TopicResource != nil {
		topics = append([]riffTopic{*v.Config.TopicResource}, topics...)
	}
	for _, t := range topics {
		if t.Name == fn.Input && fn.Input != "" {
			c.DeclaredPartitions = 1 // Topic.spec.partitions CRD default
			if t.Partitions != nil {
				c.DeclaredPartitions = *t.Partitions
			}
			break
		}
	}
	return c, c.Validate()
}

func replayRiffVariant(v *riffVector, variant string, mode lagconfig.Mode) error {
	fn := v.Config.Function
	cfg, err := riffConfig(v, mode, fn)
	if err != nil {
		return &mismatch{at: variant, field: "config", want: "valid", got: err}
	}
	sc, err := lag.New(cfg)
	if err != nil {
		return &mismatch{at: variant, field: "config", want: "valid", got: err}
	}
	base := time.Date(2018, 3, 21, 0, 0, 0, 0, time.UTC)
	var in lag.Input
	for _, t := range v.Ticks {
		at := fmt.Sprintf("tick %d (t_ms=%d) %s", t.Tick, t.TMs, variant)
		if u := t.Input.FunctionUpdate; u != nil {
			fn = *u
			if cfg, err = riffConfig(v, mode, fn); err == nil {
				err = sc.Reconfigure(cfg)
			}
			if err != nil {
				return &mismatch{at: at, field: "function_update", want: "valid", got: err}
			}
		}
		in = lag.Input{
			Partitions:    in.Partitions[:0],
			FetchFailed:   t.Input.InspectorError,
			WritesKnown:   true,
			ReplicasKnown: t.Input.ObservedReplicas != nil,
		}
		if t.Input.Writes != nil {
			in.Writes = *t.Input.Writes
		}
		if t.Input.ObservedReplicas != nil {
			in.Replicas = *t.Input.ObservedReplicas
		}
		for i, p := range t.Input.Partitions {
			part := lag.Partition{ID: int32(i), End: p.End}
			if p.Committed != nil {
				part.Committed, part.HasCommitted = *p.Committed, true
			}
			in.Partitions = append(in.Partitions, part)
		}
		d := sc.Decide(&in, base.Add(time.Duration(t.TMs)*time.Millisecond))
		want, ok := t.Expect[variant]
		if !ok {
			continue
		}
		if m := compareRiff(at, &want, &d); m != nil {
			return m
		}
	}
	return nil
}

func compareRiff(at string, want *riffExpect, d *lag.Decision) *mismatch {
	if d.Status == lag.StatusBadInput {
		return &mismatch{at: at, field: "input", want: "accepted", got: d.Err}
	}
	checks := []struct {
		field     string
		want, got any
		present   bool
	}{
		{"replicas_before", deref(want.ReplicasBefore), d.ReplicasBefore, want.ReplicasBefore != nil},
		{"max_partition_lag", deref(want.MaxPartitionLag), d.MaxLag, want.MaxPartitionLag != nil},
		{"policy_raw", deref(want.PolicyRaw), d.Proposal, want.PolicyRaw != nil},
		{"queue_length", deref(want.QueueLength), d.QueueLength, want.QueueLength != nil},
		{"queue_length_calls", deref(want.QueueLengthCalls), d.QueueLengthCalls, want.QueueLengthCalls != nil},
		{"desired", deref(want.Desired), d.Desired, want.Desired != nil},
		{"scale_called", deref(want.ScaleCalled), d.ScaleNeeded, want.ScaleCalled != nil},
	}
	for _, c := range checks {
		if c.present && c.want != c.got {
			return &mismatch{at: at, field: c.field, want: c.want, got: c.got}
		}
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
