package lag

import (
	"testing"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

func kedaCfg(faithful bool, edit func(*lagconfig.Config)) lagconfig.Config {
	c := lagconfig.DefaultConfig(lagconfig.ModeKEDA)
	c.Faithful = faithful
	c.Topic = "in"
	if edit != nil {
		edit(&c)
	}
	return c
}

// polls decides one poll per element, pollingInterval apart.
func polls(t *testing.T, cfg lagconfig.Config, ps ...[]Partition) []Decision {
	t.Helper()
	return replay(t, cfg, len(ps), func(k int) Input { return Input{Partitions: ps[k-1]} })
}

func lagsOf(d Decision, persistent bool) []int64 {
	var out []int64
	for _, p := range d.Partitions {
		if persistent {
			out = append(out, p.LagWithPersistent)
		} else {
			out = append(out, p.Lag)
		}
	}
	return out
}

func eq(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestKEDAParameters covers each Kafka scaler parameter, faithful to KEDA.
func TestKEDAParameters(t *testing.T) {
	tests := []struct {
		name       string
		edit       func(*lagconfig.Config)
		polls      [][]Partition
		wantMetric float64
		wantActive bool
		wantLags   []int64 // last poll, metric lag per partition
		wantWith   []int64 // last poll, activation lag per partition
	}{
		{"plain sum under the cap", nil,
			[][]Partition{parts(10, 5, 20, 10, 30, 20)}, 25, true, []int64{5, 10, 10}, nil},
		{"lagThreshold 10 caps at partitions x threshold", nil,
			[][]Partition{parts(40, 0, 40, 0, 40, 0)}, 30, true, nil, nil},
		{"lagThreshold 40 leaves 120 uncapped", func(c *lagconfig.Config) { c.LagThreshold = 40 },
			[][]Partition{parts(40, 0, 40, 0, 40, 0)}, 120, true, nil, nil},
		{"integer division: 29 over 2 partitions is not capped", nil,
			[][]Partition{parts(15, 0, 14, 0)}, 29, true, nil, nil},
		{"activationLagThreshold is strict: 50 is inactive", func(c *lagconfig.Config) { c.ActivationLagThreshold = 50 },
			[][]Partition{parts(25, 0, 25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, 50, false, nil, nil},
		{"activationLagThreshold: 51 is active", func(c *lagconfig.Config) { c.ActivationLagThreshold = 50 },
			[][]Partition{parts(26, 0, 25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, 51, true, nil, nil},
		{"activation uses the uncapped total", func(c *lagconfig.Config) { c.ActivationLagThreshold = 50 },
			[][]Partition{parts(60, 0)}, 10, true, nil, nil},
		{"allowIdleConsumers lifts the cap", func(c *lagconfig.Config) { c.AllowIdleConsumers = true },
			[][]Partition{parts(100, 0, 50, 0)}, 150, true, nil, nil},
		{"ensureEvenDistributionOfPartitions: 25 over 4 partitions stands for 3 → 4 consumers", func(c *lagconfig.Config) { c.EnsureEvenDistributionOfPartitions = true },
			[][]Partition{parts(25, 0, 0, 0, 0, 0, 0, 0)}, 40, true, nil, nil},
		{"ensureEvenDistributionOfPartitions: 12 over 6 partitions → 2 consumers", func(c *lagconfig.Config) { c.EnsureEvenDistributionOfPartitions = true },
			[][]Partition{parts(12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, 20, true, nil, nil},
		{"ensureEvenDistributionOfPartitions keeps the cap with allowIdleConsumers", func(c *lagconfig.Config) { c.EnsureEvenDistributionOfPartitions = true; c.AllowIdleConsumers = true },
			[][]Partition{parts(100, 0, 50, 0)}, 20, true, nil, nil},
		{"limitToPartitionsWithLag caps at lagging partitions", func(c *lagconfig.Config) { c.LimitToPartitionsWithLag = true },
			[][]Partition{parts(100, 0, 5, 5, 5, 5, 5, 5)}, 10, true, []int64{100, 0, 0, 0}, nil},
		{"excludePersistentLag: first sighting counts", func(c *lagconfig.Config) { c.ExcludePersistentLag = true; c.LagThreshold = 100 },
			[][]Partition{parts(100, 10, 200, 150)}, 140, true, []int64{90, 50}, []int64{90, 50}},
		{"excludePersistentLag: unmoved commit counts for activation only", func(c *lagconfig.Config) { c.ExcludePersistentLag = true; c.LagThreshold = 100 },
			[][]Partition{parts(100, 10, 200, 150), parts(120, 10, 260, 200)}, 60, true, []int64{0, 60}, []int64{110, 60}},
		{"excludePersistentLag: all stuck is still active", func(c *lagconfig.Config) { c.ExcludePersistentLag = true },
			[][]Partition{parts(100, 10), parts(100, 10)}, 0, true, []int64{0}, []int64{90}},
		{"offsetResetPolicy latest charges 1", nil,
			[][]Partition{parts(500, -1, 20, 10)}, 11, true, []int64{1, 10}, nil},
		{"offsetResetPolicy earliest charges the log", func(c *lagconfig.Config) { c.OffsetResetPolicy = lagconfig.ResetEarliest; c.AllowIdleConsumers = true },
			[][]Partition{parts(500, -1, 20, 10)}, 510, true, []int64{500, 10}, nil},
		{"scaleToZeroOnInvalidOffset (latest)", func(c *lagconfig.Config) { c.ScaleToZeroOnInvalidOffset = true },
			[][]Partition{parts(500, -1, 500, -1)}, 0, false, []int64{0, 0}, nil},
		{"scaleToZeroOnInvalidOffset (earliest)", func(c *lagconfig.Config) {
			c.ScaleToZeroOnInvalidOffset = true
			c.OffsetResetPolicy = lagconfig.ResetEarliest
		},
			[][]Partition{parts(500, -1, 30, 10)}, 20, true, []int64{0, 20}, nil},
		{"partitionLimitation", func(c *lagconfig.Config) { c.PartitionLimitation = []int32{0, 2} },
			[][]Partition{parts(200, 0, 900, 0, 100, 0)}, 20, true, []int64{200, 0, 100}, nil},
		{"negative lag is summed (faithful)", nil,
			[][]Partition{parts(10, 30, 15, 0)}, 0, false, []int64{-20, 15}, nil},
		{"zero lag is inactive", nil,
			[][]Partition{parts(10, 10, 20, 20)}, 0, false, []int64{0, 0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := polls(t, kedaCfg(true, tt.edit), tt.polls...)
			d := ds[len(ds)-1]
			if d.Status != StatusOK {
				t.Fatalf("Status = %v (%v), want ok", d.Status, d.Err)
			}
			if got := d.KEDA.Metric; got != tt.wantMetric {
				t.Errorf("Metric = %v, want %v", got, tt.wantMetric)
			}
			if got := d.KEDA.Active; got != tt.wantActive {
				t.Errorf("Active = %v, want %v", got, tt.wantActive)
			}
			if tt.wantLags != nil && !eq(lagsOf(d, false), tt.wantLags) {
				t.Errorf("lags = %v, want %v", lagsOf(d, false), tt.wantLags)
			}
			if tt.wantWith != nil && !eq(lagsOf(d, true), tt.wantWith) {
				t.Errorf("lags with persistent = %v, want %v", lagsOf(d, true), tt.wantWith)
			}
		})
	}
}

// TestKEDAFixed: the default keda mode never asks for more replicas than the
// bound, and a partition whose commit is ahead of its end cannot cancel real
// lag elsewhere.
func TestKEDAFixed(t *testing.T) {
	d := polls(t, kedaCfg(false, nil), parts(15, 0, 14, 0))[0]
	if d.KEDA.Metric != 20 || d.CapReason != CapPartitions {
		t.Errorf("29 over 2 partitions: Metric, CapReason = %v, %v, want 20, %v", d.KEDA.Metric, d.CapReason, CapPartitions)
	}
	d = polls(t, kedaCfg(false, nil), parts(10, 30, 15, 0))[0]
	if d.KEDA.Metric != 15 || !d.KEDA.Active || d.Partitions[0].Lag != 0 || d.Partitions[0].Rule != LagCommittedAhead {
		t.Errorf("committed ahead: Metric %v, Active %v, partition 0 %+v; want 15, true, lag 0 committed-ahead",
			d.KEDA.Metric, d.KEDA.Active, d.Partitions[0])
	}
}

// TestKEDAReplicas covers what KEDA's operator and the HPA do with the
// metric: 0->1 on activity, ceil(metric/threshold), tolerance, scale-down
// stabilization, cooldown to zero.
func TestKEDAReplicas(t *testing.T) {
	cfg := kedaCfg(false, func(c *lagconfig.Config) { c.AllowIdleConsumers = true })
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := epoch
	step := func(lag int64) Decision {
		now = now.Add(cfg.TickInterval)
		in := Input{Partitions: parts(lag, 0)}
		return s.Decide(&in, now)
	}
	if d := step(0); d.Desired != 0 {
		t.Fatalf("idle: Desired = %d, want 0", d.Desired)
	}
	if d := step(45); d.Desired != 1 || d.Reason != ReasonActivate {
		t.Fatalf("active at 0: Desired = %d (%v), want 1 (activate)", d.Desired, d.Reason)
	}
	if d := step(45); d.Desired != 5 {
		t.Fatalf("lag 45 / 10: Desired = %d, want 5", d.Desired)
	}
	if d := step(52); d.Desired != 5 || !d.KEDA.WithinTolerance {
		t.Fatalf("lag 52 at 5 (ratio 1.04): Desired = %d, WithinTolerance %v, want 5, true", d.Desired, d.KEDA.WithinTolerance)
	}
	// Scale-down is stabilized over 300 s: the 5 stays for 10 polls.
	for i := 0; i < 9; i++ {
		if d := step(12); d.Desired != 5 {
			t.Fatalf("poll %d after the drop: Desired = %d, want 5 (stabilized)", i+1, d.Desired)
		}
	}
	if d := step(12); d.Desired != 2 {
		t.Fatalf("after the window: Desired = %d, want 2", d.Desired)
	}
	// Inactive: hold minReplicas... until cooldownPeriod (300 s) has passed.
	var d Decision
	for i := 0; i < 10; i++ {
		if d = step(0); d.Desired == 0 {
			t.Fatalf("inactive poll %d: Desired = 0 before the cooldown", i+1)
		}
	}
	if !d.Idle.Counting || d.Idle.Deadline.IsZero() {
		t.Errorf("inactive: Idle = %+v, want a cooldown deadline", d.Idle)
	}
	if d = step(0); d.Desired != 0 || d.Reason != ReasonCooldown {
		t.Errorf("after cooldown: Desired = %d (%v), want 0 (cooldown)", d.Desired, d.Reason)
	}
}

func TestKEDAMaxReplicas(t *testing.T) {
	cfg := kedaCfg(false, func(c *lagconfig.Config) { c.AllowIdleConsumers = true; c.MaxReplicas = 3 })
	ds := polls(t, cfg, parts(1000, 0), parts(1000, 0))
	if got := ds[1].Desired; got != 3 {
		t.Errorf("Desired = %d, want 3 (maxReplicaCount)", got)
	}
}
