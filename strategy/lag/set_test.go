package lag

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

func TestSetTickAllTargets(t *testing.T) {
	s := NewSet()
	for _, mode := range allModes {
		cfg := lagconfig.DefaultConfig(mode)
		cfg.DeclaredPartitions = 2
		if err := s.Upsert(string(mode), cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Upsert("bad", lagconfig.Config{Mode: "kpa"}); err == nil || !strings.Contains(err.Error(), "target bad") {
		t.Errorf("Upsert with a bad mode = %v, want an error naming the target", err)
	}
	if err := s.Observe("nope", Input{}); err == nil {
		t.Error("Observe of an unknown target succeeded")
	}
	in := Input{Partitions: parts(50, 0, 50, 0), Writes: 5, WritesKnown: true}
	for _, mode := range allModes {
		if err := s.Observe(string(mode), in); err != nil {
			t.Fatal(err)
		}
	}
	in.Partitions[0].End = 999 // Observe copied: this must not leak in
	res := s.Tick(epoch, nil)
	if len(res) != 3 {
		t.Fatalf("Tick returned %d results, want 3", len(res))
	}
	for _, r := range res {
		if r.Status != StatusOK || r.Desired != 1 || !r.ScaleNeeded {
			t.Errorf("%s: %+v, want ok, 1, scale needed", r.Key, r)
		}
		d, ok := s.Explain(r.Key)
		if !ok || d.Partitions[0].End != 50 {
			t.Errorf("%s: Explain partitions = %+v, want the observed copy (end 50)", r.Key, d.Partitions)
		}
		d.Partitions[0].Lag = -42 // a copy: must not change the Set's view
		if again, _ := s.Explain(r.Key); again.Partitions[0].Lag == -42 {
			t.Errorf("%s: Explain handed out the internal buffer", r.Key)
		}
	}
	// Nothing observed since the last tick: no data, decision held. The
	// keda target (30 s polling) is not due yet.
	res = s.Tick(epoch.Add(100*time.Millisecond), res[:0])
	if len(res) != 2 {
		t.Fatalf("second Tick decided %d targets, want the 2 riff targets", len(res))
	}
	for _, r := range res {
		d, _ := s.Explain(r.Key)
		if r.Status != StatusNoData || r.Desired != 1 || !errors.Is(d.Err, ErrNoData) {
			t.Errorf("%s unobserved: %+v (%v), want no-data holding 1", r.Key, r, d.Err)
		}
	}
	if !s.Remove(string(lagconfig.ModeRiffQueue)) || s.Remove(string(lagconfig.ModeRiffQueue)) || s.Len() != 2 {
		t.Errorf("Remove: Len = %d, want 2 and a second Remove to report false", s.Len())
	}
	if _, ok := s.Explain(string(lagconfig.ModeKEDA)); !ok {
		t.Error("Explain lost the target moved by Remove")
	}
}

// TestRebuild: a decider that takes a target over replays its history and
// ends in the same state as the decider that ran it live.
func TestRebuild(t *testing.T) {
	for _, mode := range allModes {
		for _, faithful := range []bool{true, false} {
			cfg := lagconfig.DefaultConfig(mode)
			cfg.Faithful, cfg.DeclaredPartitions, cfg.ExcludePersistentLag = faithful, 3, true
			live := NewSet()
			if err := live.Upsert("t", cfg); err != nil {
				t.Fatal(err)
			}
			var history []Observation
			gen := backlog(3, 40, true)
			for k := 1; k <= 50; k++ {
				in := gen(k)
				if k > 30 {
					in = Input{Partitions: parts(500, 500, 500, 500, 500, 500), WritesKnown: true}
				}
				at := epoch.Add(time.Duration(k) * cfg.TickInterval)
				history = append(history, Observation{Time: at, Input: in})
				if err := live.Observe("t", in); err != nil {
					t.Fatal(err)
				}
				live.Tick(at, nil)
			}
			taken := NewSet()
			if err := taken.Upsert("t", cfg); err != nil {
				t.Fatal(err)
			}
			if err := taken.Rebuild("t", history); err != nil {
				t.Fatal(err)
			}
			for k := 51; k <= 200; k++ {
				in := Input{Partitions: parts(500, 500, 500, 500, 500, 500), WritesKnown: true}
				at := epoch.Add(time.Duration(k) * cfg.TickInterval)
				for _, s := range []*Set{live, taken} {
					if err := s.Observe("t", in); err != nil {
						t.Fatal(err)
					}
				}
				a, b := live.Tick(at, nil)[0], taken.Tick(at, nil)[0]
				if a != b {
					t.Fatalf("%s faithful=%v tick %d: live %+v, rebuilt %+v", mode, faithful, k, a, b)
				}
			}
			if err := taken.Rebuild("t", []Observation{{Time: epoch.Add(time.Second)}, {Time: epoch}}); err == nil {
				t.Error("Rebuild accepted history going back in time")
			}
		}
	}
}

// TestSetIntervals: one shell loop ticking every 100 ms (with jitter)
// decides riff targets every tick and keda targets every 30 s.
func TestSetIntervals(t *testing.T) {
	s := NewSet()
	for _, mode := range []lagconfig.Mode{lagconfig.ModeRiffQueue, lagconfig.ModeKEDA} {
		if err := s.Upsert(string(mode), lagconfig.DefaultConfig(mode)); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	now := epoch
	for i := 0; i < 3000; i++ { // 300 s
		now = now.Add(100*time.Millisecond + time.Duration(i%7-3)*time.Millisecond)
		for _, r := range s.Tick(now, nil) {
			counts[r.Key]++
		}
	}
	if got := counts[string(lagconfig.ModeRiffQueue)]; got != 3000 {
		t.Errorf("riff-queue decided %d times in 3000 ticks, want 3000", got)
	}
	if got := counts[string(lagconfig.ModeKEDA)]; got < 10 || got > 11 {
		t.Errorf("keda decided %d times in 300 s, want 10 or 11 (every 30 s)", got)
	}
}

func ExampleSet() {
	set := NewSet()
	cfg, err := lagconfig.ParseConfig("riff-queue", map[string]string{"idleTimeoutMs": "2000", "topic": "orders"})
	if err != nil {
		panic(err)
	}
	if err := set.Upsert("shop/fn", cfg); err != nil {
		panic(err)
	}
	// Each tick the shell reports what the collector read, then ticks once.
	_ = set.Observe("shop/fn", Input{
		Partitions: []Partition{{ID: 0, End: 120, Committed: 100, HasCommitted: true}},
		Replicas:   0, ReplicasKnown: true,
	})
	for _, r := range set.Tick(time.Unix(0, 0), nil) {
		d, _ := set.Explain(r.Key)
		fmt.Println(r.Key, r.Desired, r.ScaleNeeded)
		fmt.Println(d.Summary())
	}
	// Output:
	// shop/fn 1 true
	// riff-queue: 0 -> 1: work arrived at 0 replicas: start 1 at once; queue 20, writes 0, proposal 1, capped at 1 by partition count
}
