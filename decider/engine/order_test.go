package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// TestTickAfterRemovals checks that a tick applies every held target's own
// samples, and only theirs, after targets were removed from the front, the
// middle and the end of the engine's walk order, and one was added back.
func TestTickAfterRemovals(t *testing.T) {
	t.Parallel()
	e := New(Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
	targets := make([]Target, 6)
	for i := range targets {
		targets[i] = Target{Namespace: "ns", Name: fmt.Sprint("t", i)}
		if err := e.Upsert(Spec{Target: targets[i], Strategy: KPA, Reachable: true}, epoch); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 3, 5} {
		if !e.Remove(targets[i]) {
			t.Fatalf("Remove(%s) = false", targets[i].Key())
		}
	}
	if err := e.Upsert(Spec{Target: targets[3], Strategy: KPA, Reachable: true}, epoch); err != nil {
		t.Fatal(err)
	}
	held := map[int]bool{1: true, 2: true, 3: true, 4: true}
	if len(e.order) != len(held) {
		t.Fatalf("the walk order holds %d targets, want %d", len(e.order), len(held))
	}
	for i, tg := range e.order {
		if tg.pos != i || e.targets[keyOf(tg.ref)] != tg {
			t.Fatalf("walk order[%d] = %s at pos %d, held %v", i, tg.key, tg.pos, e.targets[keyOf(tg.ref)] == tg)
		}
	}

	// Target i carries 70·i in flight, 70 per pod being the default
	// target: it wants i pods.
	for s := range 4 {
		at := epoch.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
		for i, tg := range targets {
			_, err := e.Record(tg, Sample{At: at, Stat: kpa.Stat{AverageConcurrentRequests: float64(70 * i)}, ReadyPods: 1}, at)
			if held[i] != (err == nil) {
				t.Fatalf("Record(%s) = %v, held %v", tg.Key(), err, held[i])
			}
			if !held[i] && !errors.Is(err, ErrUnknownTarget) {
				t.Fatalf("Record(%s) = %v, want ErrUnknownTarget", tg.Key(), err)
			}
		}
	}
	now := epoch.Add(4 * time.Second)
	got := map[string]int32{}
	for _, d := range e.Tick(now) {
		got[d.Target.Key()] = d.Desired
	}
	for i, tg := range targets {
		d, ok := e.Get(tg)
		if ok != held[i] {
			t.Errorf("Get(%s): held %v, want %v", tg.Key(), ok, held[i])
			continue
		}
		if !ok {
			continue
		}
		if d.Desired != int32(i) || d.At != now {
			t.Errorf("%s: desired %d at %v, want %d at %v (%s)", tg.Key(), d.Desired, d.At, i, now, d.Reason)
		}
		if got[tg.Key()] != int32(i) {
			t.Errorf("%s: Tick reported %d, want %d", tg.Key(), got[tg.Key()], i)
		}
	}
	if len(got) != len(held) {
		t.Errorf("Tick reported %d targets (%v), want %d", len(got), got, len(held))
	}
}
