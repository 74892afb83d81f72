package lag

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

var allModes = []lagconfig.Mode{lagconfig.ModeRiffOffset, lagconfig.ModeRiffQueue, lagconfig.ModeKEDA}

// TestBadInputRejected: inputs no rule can use are rejected with an error
// naming the field and the value; the previous decision is held, and
// nothing panics or reads as zero lag.
func TestBadInputRejected(t *testing.T) {
	tests := []struct {
		name    string
		in      Input
		wantErr string
	}{
		{"topic with zero partitions", Input{PartitionCount: 0}, "topic has 0 partitions"},
		{"zero partitions with a count", Input{PartitionCount: 4}, "topic has 0 partitions (partitionCount = 4)"},
		{"negative end offset", Input{Partitions: []Partition{{ID: 0, End: -1}}}, "partition 0: end offset = -1"},
		{"committed below -1", Input{Partitions: []Partition{{ID: 0, End: 5, Committed: -7, HasCommitted: true}}}, "committed offset = -7"},
		{"negative partition id", Input{Partitions: []Partition{{ID: -2, End: 5}}}, "partition id = -2"},
		{"partition id beyond the count", Input{PartitionCount: 2, Partitions: parts(1, 1, 1, 1, 1, 1)}, "3 partitions reported, want <= partitionCount 2"},
		{"id outside the count", Input{PartitionCount: 2, Partitions: []Partition{{ID: 5, End: 1}}}, "partition id = 5, want in [0, 2)"},
		{"duplicate partition", Input{Partitions: []Partition{{ID: 1, End: 1}, {ID: 1, End: 2}}}, "partition 1 reported twice"},
		{"negative replicas", Input{Partitions: parts(1, 1), Replicas: -3, ReplicasKnown: true}, "replicas = -3"},
		{"negative writes", Input{Partitions: parts(1, 1), Writes: -3, WritesKnown: true}, "writes = -3"},
		{"negative partition count", Input{Partitions: parts(1, 1), PartitionCount: -1}, "partitionCount = -1"},
	}
	for _, mode := range allModes {
		for _, faithful := range []bool{true, false} {
			for _, tt := range tests {
				t.Run(string(mode)+"/"+tt.name, func(t *testing.T) {
					cfg := lagconfig.DefaultConfig(mode)
					cfg.Faithful = faithful
					cfg.DeclaredPartitions = 3
					s, err := New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					// Get to 1 replica first, so "held" is distinguishable from 0.
					good := Input{Partitions: parts(50, 0, 50, 0, 50, 0), Writes: 1, WritesKnown: true}
					if d := s.Decide(&good, epoch); d.Desired != 1 {
						t.Fatalf("setup: Desired = %d, want 1", d.Desired)
					}
					d := s.Decide(&tt.in, epoch.Add(time.Second))
					if d.Status != StatusBadInput || !errors.Is(d.Err, ErrBadInput) {
						t.Fatalf("Status, Err = %v, %v, want bad-input, ErrBadInput", d.Status, d.Err)
					}
					if !strings.Contains(d.Err.Error(), tt.wantErr) {
						t.Errorf("Err = %q, want it to contain %q", d.Err, tt.wantErr)
					}
					if d.Desired != 1 {
						t.Errorf("Desired = %d, want 1 (held)", d.Desired)
					}
				})
			}
		}
	}
}

// TestCommittedAheadOfEnd: an end offset behind the committed offset (topic
// recreated) counts as 0 lag and is flagged; only faithful keda sums the
// negative value, as KEDA does.
func TestCommittedAheadOfEnd(t *testing.T) {
	for _, mode := range allModes {
		for _, faithful := range []bool{true, false} {
			cfg := lagconfig.DefaultConfig(mode)
			cfg.Faithful, cfg.DeclaredPartitions = faithful, 2
			d := replay(t, cfg, 1, func(int) Input { return Input{Partitions: parts(10, 30, 15, 0), WritesKnown: true} })[0]
			want := int64(0)
			if mode == lagconfig.ModeKEDA && faithful {
				want = -20
			}
			p := d.Partitions[0]
			if d.Status != StatusOK || p.Lag != want || p.Rule != LagCommittedAhead {
				t.Errorf("%s faithful=%v: Status %v, partition 0 %+v, want lag %d, rule committed-ahead", mode, faithful, d.Status, p, want)
			}
			if mode != lagconfig.ModeKEDA && d.TotalLag != 15 {
				t.Errorf("%s faithful=%v: TotalLag = %d, want 15", mode, faithful, d.TotalLag)
			}
		}
	}
}

// TestMissingCommit: a partition without a committed offset (or Kafka's -1)
// counts by each mode's documented rule, never silently as zero.
func TestMissingCommit(t *testing.T) {
	for _, committed := range []Partition{{ID: 0, End: 40}, {ID: 0, End: 40, Committed: -1, HasCommitted: true}} {
		in := Input{Partitions: []Partition{committed}, WritesKnown: true}
		for _, tt := range []struct {
			mode lagconfig.Mode
			edit func(*lagconfig.Config)
			want int64
			rule LagRule
		}{
			{lagconfig.ModeRiffOffset, nil, 40, LagNoCommitFromZero},
			{lagconfig.ModeRiffQueue, nil, 40, LagNoCommitFromZero},
			{lagconfig.ModeKEDA, nil, 1, LagNoCommitLatest},
			{lagconfig.ModeKEDA, func(c *lagconfig.Config) { c.OffsetResetPolicy = lagconfig.ResetEarliest }, 40, LagNoCommitEarliest},
		} {
			cfg := lagconfig.DefaultConfig(tt.mode)
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			d := replay(t, cfg, 1, func(int) Input { return in })[0]
			if p := d.Partitions[0]; p.Lag != tt.want || p.Rule != tt.rule {
				t.Errorf("%s: partition %+v, want lag %d rule %v", tt.mode, p, tt.want, tt.rule)
			}
		}
	}
}

// TestPartitionsAppearAndDisappear: the partition set may change between
// ticks (a topic grows, metadata is partial). State is keyed by partition
// id: a new partition is a first sighting, a vanished one stops counting,
// and the fixed cap follows the reported count.
func TestPartitionsAppearAndDisappear(t *testing.T) {
	for _, mode := range allModes {
		for _, faithful := range []bool{true, false} {
			cfg := lagconfig.DefaultConfig(mode)
			cfg.Faithful, cfg.DeclaredPartitions, cfg.ExcludePersistentLag = faithful, 2, true
			seq := []Input{
				{Partitions: parts(50, 0, 50, 0), WritesKnown: true},
				{Partitions: parts(60, 10, 60, 10, 30, 0, 30, 0), PartitionCount: 4, WritesKnown: true},
				{Partitions: []Partition{{ID: 3, End: 40, Committed: 0, HasCommitted: true}}, PartitionCount: 4, WritesKnown: true},
				{Partitions: parts(70, 20), PartitionCount: 1, WritesKnown: true},
			}
			ds := replay(t, cfg, len(seq), func(k int) Input { return seq[k-1] })
			for k, d := range ds {
				if d.Status != StatusOK {
					t.Errorf("%s faithful=%v tick %d: Status %v (%v), want ok", mode, faithful, k+1, d.Status, d.Err)
				}
				if got, want := len(d.Partitions), len(seq[k].Partitions); got != want {
					t.Errorf("%s tick %d: %d partitions explained, want %d", mode, k+1, got, want)
				}
			}
			if mode != lagconfig.ModeKEDA && !faithful && ds[1].PartitionCount != 4 {
				t.Errorf("%s fixed: PartitionCount after growth = %d, want 4", mode, ds[1].PartitionCount)
			}
			if mode == lagconfig.ModeKEDA && ds[2].TotalLagWithPersistent != 40 {
				t.Errorf("keda: lag with one partition left = %d, want 40", ds[2].TotalLagWithPersistent)
			}
		}
	}
}

func TestNaNAndBadThresholds(t *testing.T) {
	tests := []struct {
		mode    string
		params  map[string]string
		wantErr string
	}{
		{"keda", map[string]string{"lagThreshold": "NaN"}, `lagThreshold "NaN"`},
		{"keda", map[string]string{"lagThreshold": "0"}, `lagThreshold "0"`},
		{"keda", map[string]string{"lagThreshold": "1.5"}, `lagThreshold "1.5"`},
		{"keda", map[string]string{"activationLagThreshold": "-1"}, `activationLagThreshold "-1"`},
		{"keda", map[string]string{"activationLagThreshold": "Inf"}, `activationLagThreshold "Inf"`},
		{"keda", map[string]string{"tolerance": "NaN"}, `tolerance "NaN"`},
		{"keda", map[string]string{"offsetResetPolicy": "newest"}, `offsetResetPolicy "newest"`},
		{"keda", map[string]string{"allowIdleConsumers": "true", "limitToPartitionsWithLag": "true"}, `limitToPartitionsWithLag "true"`},
		{"keda", map[string]string{"partitionLimitation": "3-1"}, `partitionLimitation "3-1"`},
		{"keda", map[string]string{"maxReplicaCount": "0"}, `maxReplicaCount "0"`},
		{"riff-offset", map[string]string{"lagForMax": "1"}, `lagForMax "1"`},
		{"riff-offset", map[string]string{"lagForOne": "NaN"}, `lagForOne "NaN"`},
		{"riff-queue", map[string]string{"idleTimeoutMs": "-5"}, `idleTimeoutMs "-5"`},
		{"riff-queue", map[string]string{"tickInterval": "0s"}, `tickInterval "0s"`},
		{"riff-queue", map[string]string{"tickInterval": "1ns"}, `tickInterval "1ns": want >= 50ms`},
		{"riff-queue", map[string]string{"maxReplicas": "-2"}, `maxReplicas "-2"`},
		{"riff-queue", map[string]string{"idleTimeoutMsx": "5"}, `idleTimeoutMsx "5": unknown parameter`},
		{"kpa", nil, `mode "kpa"`},
	}
	for _, tt := range tests {
		_, err := lagconfig.ParseConfig(tt.mode, tt.params)
		if !errors.Is(err, lagconfig.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseConfig(%s, %v) = %v, want an ErrInvalidConfig naming %s", tt.mode, tt.params, err, tt.wantErr)
		}
	}
	// A Config built in Go is validated too.
	c := lagconfig.DefaultConfig(lagconfig.ModeKEDA)
	c.Tolerance = math.NaN()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `tolerance "NaN"`) {
		t.Errorf("Validate with NaN tolerance = %v, want an error naming tolerance", err)
	}
	if _, err := New(c); err == nil {
		t.Error("New with an invalid Config succeeded")
	}
}

// TestHugeOffsets: offsets near the int64 limit saturate instead of
// wrapping into negative lag, and the decision stays within the cap.
func TestHugeOffsets(t *testing.T) {
	var ps []Partition
	for i := int32(0); i < 12; i++ {
		ps = append(ps, Partition{ID: i, End: math.MaxInt64, Committed: 0, HasCommitted: true})
	}
	for _, mode := range allModes {
		for _, faithful := range []bool{true, false} {
			cfg := lagconfig.DefaultConfig(mode)
			cfg.Faithful, cfg.DeclaredPartitions = faithful, 12
			if mode == lagconfig.ModeKEDA {
				cfg.LagThreshold = math.MaxInt64
			}
			ds := replay(t, cfg, 40, func(int) Input { return Input{Partitions: ps, WritesKnown: true} })
			d := ds[39]
			if d.Status != StatusOK || d.TotalLag != math.MaxInt64 || d.Desired < 1 || d.Desired > 12 {
				t.Errorf("%s faithful=%v: Status %v, TotalLag %d, Desired %d; want ok, saturated, in [1, 12]",
					mode, faithful, d.Status, d.TotalLag, d.Desired)
			}
		}
	}
	s, _ := New(lagconfig.DefaultConfig(lagconfig.ModeRiffQueue))
	if d := s.Decide(nil, epoch); d.Status != StatusNoData {
		t.Errorf("Decide(nil) Status = %v, want no-data", d.Status)
	}
}
