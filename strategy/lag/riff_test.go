package lag

import (
	"errors"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

func TestOffsetPolicy(t *testing.T) {
	tests := []struct {
		name   string
		maxLag int64
		m      int32
		want   int32
	}{
		{"no lag", 0, 3, 0},
		{"lag for one", 1, 3, 1},
		{"midway", 6, 3, 2},
		{"lag for max", 10, 3, 3},
		{"beyond max", 5000, 3, 3},
		{"cap 1 with lag", 7, 1, 1},
		{"cap 1 without lag", 0, 1, 0},
		{"cap 0 never starts", 50, 0, 0},
		{"12 partitions, no lag", 0, 12, 0},
		{"20 partitions, no lag (negative before clamp)", 0, 20, 0},
		{"huge lag does not overflow to 0", 1 << 40, 12, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OffsetPolicy(tt.maxLag, tt.m, lagconfig.DefaultConfig(lagconfig.ModeRiffOffset).LagForOne, lagconfig.DefaultConfig(lagconfig.ModeRiffOffset).LagForMax); got != tt.want {
				t.Errorf("OffsetPolicy(%d, %d) = %d, want %d", tt.maxLag, tt.m, got, tt.want)
			}
		})
	}
}

// TestSmoothTimings checks riff's smoother: the ramp from 1 toward T and the
// decay from 1.0.
func TestSmoothTimings(t *testing.T) {
	ticksTo := func(target, n int32) int {
		m := float32(1)
		for k := 1; k < 200; k++ {
			sm := smooth(m, target, 1)
			m = sm.After
			if sm.Rounded == n {
				return k
			}
		}
		return -1
	}
	for _, tt := range []struct {
		target, n int32
		want      int
	}{
		{2, 2, 14}, {3, 2, 6}, {3, 3, 28}, {4, 2, 4}, {4, 3, 14}, {4, 4, 35}, {0, 0, 14},
	} {
		if got := ticksTo(tt.target, tt.n); got != tt.want {
			t.Errorf("ramp from 1 toward %d reaches %d after %d ticks, want %d", tt.target, tt.n, got, tt.want)
		}
	}
	if sm := smooth(0.2, 3, 0); !sm.FromZero || sm.Rounded != 1 || sm.After != 1 {
		t.Errorf("smooth at 0 replicas = %+v, want the 0->1 special case", sm)
	}
}

// backlog keeps every partition at the same lag; moving says whether the
// consumer makes progress (offsets advance by 10 a tick).
func backlog(n int, lagPer int64, moving bool) func(k int) Input {
	return func(k int) Input {
		var base, writes int64 = 100, 0
		if moving {
			base += int64(10 * k)
			writes = int64(10 * n)
		}
		in := Input{Writes: writes, WritesKnown: true}
		for i := 0; i < n; i++ {
			in.Partitions = append(in.Partitions, Partition{ID: int32(i), End: base + lagPer, Committed: base, HasCommitted: true})
		}
		return in
	}
}

func TestRiffScenarios(t *testing.T) {
	const s2, s10 = 2 * time.Second, 10 * time.Second
	tests := []struct {
		name string
		cfg  lagconfig.Config
		n    int
		gen  func(k int) Input
		want string
	}{
		{"offset backlog ramps to the cap", riffConfig(lagconfig.ModeRiffOffset, true, 3, s10), 60, backlog(3, 50, true), "1-6:1, 7-28:2, 29-60:3"},
		{"queue backlog ramps to the cap", riffConfig(lagconfig.ModeRiffQueue, true, 3, s10), 60, backlog(3, 50, true), "1-6:1, 7-28:2, 29-60:3"},
		// riff v0.0.5: no offset moved since the previous tick, no scale-up.
		{"offset stalled consumer holds", riffConfig(lagconfig.ModeRiffOffset, true, 3, s10), 60, backlog(3, 50, false), "1-60:1"},
		{"offset stalled consumer holds (fixed)", riffConfig(lagconfig.ModeRiffOffset, false, 3, s10), 60, backlog(3, 50, false), "1-60:1"},
		{"queue stalled consumer ramps", riffConfig(lagconfig.ModeRiffQueue, true, 3, s10), 60, backlog(3, 50, false), "1-6:1, 7-28:2, 29-60:3"},
		// riff: no Topic resource caps at 1; the fixed mode uses the
		// partitions the collector reports.
		{"no topic resource caps at 1", riffConfig(lagconfig.ModeRiffQueue, true, 0, s10), 40, backlog(4, 50, true), "1-40:1"},
		{"no topic resource (fixed) uses real partitions", riffConfig(lagconfig.ModeRiffQueue, false, 0, s10), 40, backlog(4, 50, true), "1-4:1, 5-14:2, 15-35:3, 36-40:4"},
		// riff: the idle timeout's 10 s default, zero lag from tick 6.
		{"offset default idle timeout", riffConfig(lagconfig.ModeRiffOffset, true, 1, s10), 150, burst(6), "1-118:1, 119-150:0"},
		{"queue default idle timeout", riffConfig(lagconfig.ModeRiffQueue, true, 1, s10), 150, burst(6), "1-118:1, 119-150:0"},
		// riff: sparse traffic flaps in v0.0.6, not in v0.0.5.
		{"queue sparse trickle flaps", riffConfig(lagconfig.ModeRiffQueue, true, 1, s2), 150, trickle,
			"1-36:1, 37-40:0, 41-76:1, 77-80:0, 81-116:1, 117-120:0, 121-150:1"},
		{"offset sparse trickle keeps the pod", riffConfig(lagconfig.ModeRiffOffset, true, 1, s2), 150, trickle, "1-150:1"},
		{"queue sparse trickle (fixed) keeps the pod", riffConfig(lagconfig.ModeRiffQueue, false, 1, s2), 150, trickle, "1-150:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ranges(replay(t, tt.cfg, tt.n, tt.gen)); got != tt.want {
				t.Errorf("desired = %s, want %s", got, tt.want)
			}
		})
	}
}

// burst has lag on a 1-partition topic for ticks 1..until-1, then none.
func burst(until int) func(k int) Input {
	return func(k int) Input {
		if k < until {
			return Input{Partitions: parts(5, int64(k-1)), Writes: 1, WritesKnown: true}
		}
		return Input{Partitions: parts(5, 5), WritesKnown: true}
	}
}

// trickle writes one message a second, consumed before the next sample; the
// first one is still unconsumed at tick 1.
func trickle(k int) Input {
	end := int64((k + 9) / 10)
	in := Input{Partitions: parts(end, end), WritesKnown: true}
	if k%10 == 1 {
		in.Writes = 1
	}
	if k == 1 {
		in.Partitions = parts(1, -1)
	}
	return in
}

func TestTick97msIdle1000(t *testing.T) {
	cfg := riffConfig(lagconfig.ModeRiffQueue, true, 1, time.Second)
	cfg.TickInterval = 97 * time.Millisecond
	if got, want := ranges(replay(t, cfg, 40, burst(2))), "1-25:1, 26-40:0"; got != want {
		t.Errorf("desired = %s, want %s", got, want)
	}
}

// TestHotPartition: one partition carries all the lag. riff drives the
// function to the cap (vector skewed-partition-lag); the fixed modes stop at
// the number of partitions with lag.
func TestHotPartition(t *testing.T) {
	hot := func(k int) Input {
		in := Input{Writes: 20, WritesKnown: true}
		in.Partitions = parts(int64(100+20*k), int64(50+10*k), 500, 500, 500, 500, 500, 500)
		return in
	}
	for _, mode := range []lagconfig.Mode{lagconfig.ModeRiffOffset, lagconfig.ModeRiffQueue} {
		faithful := replay(t, riffConfig(mode, true, 4, 10*time.Second), 60, hot)
		if got, want := ranges(faithful), "1-4:1, 5-14:2, 15-35:3, 36-60:4"; got != want {
			t.Errorf("%s faithful: desired = %s, want %s", mode, got, want)
		}
		fixed := replay(t, riffConfig(mode, false, 4, 10*time.Second), 60, hot)
		if got, want := ranges(fixed), "1-60:1"; got != want {
			t.Errorf("%s fixed: desired = %s, want %s", mode, got, want)
		}
		if got := fixed[59].CapReason; got != CapLaggingPartitions {
			t.Errorf("%s fixed: CapReason = %v, want %v", mode, got, CapLaggingPartitions)
		}
	}
}

// TestStaleStatus: a Deployment event with status.replicas=0 while the
// function runs at 3. riff resets its smoothing and drops to 1 (vector
// informer-stale-replicas); the fixed modes ignore it and re-apply 3.
func TestStaleStatus(t *testing.T) {
	gen := func(k int) Input {
		in := backlog(3, 50, true)(k)
		switch k {
		case 30:
			in.Replicas, in.ReplicasKnown = 0, true
		case 50:
			in.Replicas, in.ReplicasKnown = 1, true
		}
		return in
	}
	for _, mode := range []lagconfig.Mode{lagconfig.ModeRiffOffset, lagconfig.ModeRiffQueue} {
		got := replay(t, riffConfig(mode, true, 3, 10*time.Second), 70, gen)
		if r, want := ranges(got), "1-6:1, 7-28:2, 29-29:3, 30-35:1, 36-57:2, 58-70:3"; r != want {
			t.Errorf("%s faithful: desired = %s, want %s", mode, r, want)
		}
		got = replay(t, riffConfig(mode, false, 3, 10*time.Second), 70, gen)
		if r, want := ranges(got), "1-6:1, 7-28:2, 29-70:3"; r != want {
			t.Errorf("%s fixed: desired = %s, want %s", mode, r, want)
		}
		if !got[29].ScaleNeeded || !got[49].ScaleNeeded {
			t.Errorf("%s fixed: ScaleNeeded at the stale ticks = %v, %v, want true, true (re-apply 3)",
				mode, got[29].ScaleNeeded, got[49].ScaleNeeded)
		}
	}
}

// TestFailedScaleRetried: Scale keeps failing, so the observed count stays
// 0. riff records its request as applied and never calls Scale again; the
// fixed modes ask for it on every tick until it lands.
func TestFailedScaleRetried(t *testing.T) {
	for _, mode := range []lagconfig.Mode{lagconfig.ModeRiffOffset, lagconfig.ModeRiffQueue} {
		// Faithful: no Deployment event arrives because nothing changed.
		got := replay(t, riffConfig(mode, true, 1, 10*time.Second), 10, backlog(1, 5, true))
		for k, d := range got {
			if want := k == 0; d.ScaleNeeded != want {
				t.Errorf("%s faithful tick %d: ScaleNeeded = %v, want %v", mode, k+1, d.ScaleNeeded, want)
			}
		}
		// Fixed: the collector reports 0 running replicas every tick.
		gen := func(k int) Input {
			in := backlog(1, 5, true)(k)
			in.Replicas, in.ReplicasKnown = 0, true
			return in
		}
		got = replay(t, riffConfig(mode, false, 1, 10*time.Second), 10, gen)
		for k, d := range got {
			if !d.ScaleNeeded || d.Desired != 1 {
				t.Errorf("%s fixed tick %d: Desired, ScaleNeeded = %d, %v, want 1, true", mode, k+1, d.Desired, d.ScaleNeeded)
			}
		}
	}
}

// TestKafkaError: the offset fetch fails on ticks 5..15. riff v0.0.6 counts
// it as a non-empty queue and starts an idle function (vector
// inspector-error); the fixed modes hold their decision and report no data.
func TestKafkaError(t *testing.T) {
	idle := func(k int) Input {
		return Input{Partitions: parts(0, 0, 0, 0), WritesKnown: true, FetchFailed: k >= 5 && k <= 15}
	}
	faithful := replay(t, riffConfig(lagconfig.ModeRiffQueue, true, 2, time.Second), 60, idle)
	if got, want := ranges(faithful), "1-4:0, 5-38:1, 39-60:0"; got != want {
		t.Errorf("faithful: desired = %s, want %s", got, want)
	}
	if got := faithful[4].QueueLength; got != -1 {
		t.Errorf("faithful tick 5: QueueLength = %d, want -1", got)
	}
	for _, mode := range []lagconfig.Mode{lagconfig.ModeRiffOffset, lagconfig.ModeRiffQueue, lagconfig.ModeKEDA} {
		cfg := riffConfig(mode, false, 2, time.Second)
		if mode == lagconfig.ModeKEDA {
			cfg = lagconfig.DefaultConfig(lagconfig.ModeKEDA)
		}
		fixed := replay(t, cfg, 60, idle)
		if got, want := ranges(fixed), "1-60:0"; got != want {
			t.Errorf("%s fixed: desired = %s, want %s", mode, got, want)
		}
		if d := fixed[4]; d.Status != StatusNoData || !errors.Is(d.Err, ErrNoData) {
			t.Errorf("%s fixed tick 5: Status, Err = %v, %v, want no-data, ErrNoData", mode, d.Status, d.Err)
		}
		// Running at 3 when the broker goes away: held, never read as zero.
		busy := func(k int) Input {
			in := backlog(3, 50, true)(k)
			in.FetchFailed = k > 40
			return in
		}
		got := replay(t, riffConfig(mode, false, 3, time.Second), 80, busy)
		if got[79].Desired != 3 {
			t.Errorf("%s fixed: desired after 40 failed fetches = %d, want 3 (held)", mode, got[79].Desired)
		}
	}
}

// TestInputTopicChange: riff v0.0.6 rebuilds its chain when the input
// changes, so an empty new topic drops the function to 0 at once, bypassing
// the idle timeout (vector input-topic-change). The fixed mode keeps its
// state and waits the idle timeout.
func TestInputTopicChange(t *testing.T) {
	for _, faithful := range []bool{true, false} {
		cfg := riffConfig(lagconfig.ModeRiffQueue, faithful, 3, 2*time.Second)
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []Decision
		for k := 1; k <= 120; k++ {
			in := backlog(3, 50, true)(k)
			if k == 41 {
				cfg.Topic = "empty"
				if err := s.Reconfigure(cfg); err != nil {
					t.Fatal(err)
				}
			}
			if k >= 41 {
				in = Input{Partitions: parts(0, -1, 0, -1, 0, -1), WritesKnown: true}
			}
			got = append(got, s.Decide(&in, epoch.Add(time.Duration(k)*100*time.Millisecond)))
		}
		if faithful {
			if r, want := ranges(got), "1-6:1, 7-28:2, 29-40:3, 41-120:0"; r != want {
				t.Errorf("faithful: desired = %s, want %s", r, want)
			}
			continue
		}
		// Fixed: the memory decays from 3 (no step down by more than one),
		// the last replica is held for the 2 s idle timeout, then 0.
		firstZero := 0
		for k := 41; k <= 120; k++ {
			prev, cur := got[k-2].Desired, got[k-1].Desired
			if cur < prev-1 || cur > prev {
				t.Errorf("fixed tick %d: %d -> %d, want a gradual decay", k, prev, cur)
			}
			if cur == 0 && firstZero == 0 {
				firstZero = k
			}
		}
		if firstZero == 0 || got[firstZero-21].Desired != 1 {
			t.Errorf("fixed: desired = %s, want 1 held for 20 ticks before 0", ranges(got))
		}
	}
}

func TestExplainOffset(t *testing.T) {
	got := replay(t, riffConfig(lagconfig.ModeRiffOffset, true, 3, 2*time.Second), 40, burst(5))
	d := got[20] // smoothed to 0 at tick ~19: counting down
	if !d.Idle.Counting || !d.Idle.Holding || d.Idle.Held != 1 || d.Reason != ReasonIdleHold {
		t.Errorf("tick 21: Idle = %+v, Reason = %v, want a running countdown holding 1", d.Idle, d.Reason)
	}
	if d.Idle.Deadline.IsZero() || d.Summary() == "" {
		t.Errorf("tick 21: Deadline = %v, Summary = %q", d.Idle.Deadline, d.Summary())
	}
	first := got[0]
	if len(first.Partitions) != 1 || first.Partitions[0].Lag != 5 || first.MaxLag != 5 || first.Proposal != 1 || !first.Smoothing.FromZero {
		t.Errorf("tick 1: %+v, want lag 5, proposal 1, from-zero smoothing", first)
	}
}
