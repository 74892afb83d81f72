package kpa

import (
	"fmt"
	"testing"
	"time"
)

// TestReplayRebuildsState checks that a target rebuilt by replaying its
// history at the present decides exactly like the target that lived it.
func TestReplayRebuildsState(t *testing.T) {
	t.Parallel()
	type rec struct {
		at time.Time
		s  Stat
	}
	var history []rec
	for s := range 150 {
		c := 21.0
		if s > 100 {
			c = 3.5 * float64(s%5)
		}
		history = append(history, rec{at(float64(s) + 0.5), Stat{AverageConcurrentRequests: c, RequestCount: c / 2}})
	}
	live := mustNew(t, testSpec(), 1)
	for _, r := range history {
		if _, _, err := live.Record(r.at, r.at, r.s, SourceScraper); err != nil {
			t.Fatal(err)
		}
	}
	now := at(151)
	rebuilt := mustNew(t, testSpec(), 1)
	kept := 0
	for _, r := range history {
		if _, reason, _ := rebuilt.Record(r.at, now, r.s, SourceScraper); reason == Kept {
			kept++
		}
	}
	if kept != 58 {
		t.Errorf("replay kept %d stats, want the 58 inside the stable window at now", kept)
	}
	for _, m := range []Metric{Concurrency, RPS} {
		live.spec.ScalingMetric, rebuilt.spec.ScalingMetric = m, m
		ls, lp, _ := live.Observe(now)
		rs, rp, _ := rebuilt.Observe(now)
		if ls != rs || lp != rp {
			t.Errorf("%v: live (%v, %v), rebuilt (%v, %v)", m, ls, lp, rs, rp)
		}
	}
}

// Example shows the decider service's loop: one Set, one tick for all
// targets, stats recorded as they arrive and pokes run at once.
func Example() {
	s := NewSet()
	key := Key{Namespace: "default", Name: "hello-00001"}
	spec := Spec{
		ScalingMetric: Concurrency, TargetValue: 7, TotalValue: 10, PanicThreshold: 2,
		MaxScaleUpRate: 1000, MaxScaleDownRate: 2, StableWindow: time.Minute, InitialScale: 1,
		Reachable: true, ActivatorCapacity: 100, MetricStableWindow: time.Minute,
		MetricPanicWindow: 6 * time.Second, Scraped: true,
	}
	t0 := time.Unix(1700000000, 0)
	if err := s.Create(key, spec, t0, 1); err != nil {
		panic(err)
	}
	_ = s.SetReady(key, 1)
	var changed []Change
	for sec := 0; sec < 4; sec++ {
		now := t0.Add(time.Duration(sec)*time.Second + 500*time.Millisecond)
		if poke, _, err := s.Record(key, now, now, Stat{AverageConcurrentRequests: 21}, SourceScraper); err == nil && poke {
			_, _, _ = s.Poke(key, now)
		}
		if sec%2 == 1 {
			changed = s.Tick(t0.Add(time.Duration(sec+1)*time.Second), changed[:0])
			for _, c := range changed {
				fmt.Printf("%s: desired %d\n", c.Key, c.Status.DesiredScale)
			}
		}
	}
	d, _, _ := s.Get(key)
	fmt.Println(d.Reason())
	// Output:
	// default/hello-00001: desired 3
	// panic: concurrency 21 over 6s / target 7 → 3
}
