package engine

import (
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lag"
)

// TestAdvisoryDecisionsSaySo: an advisory target is decided like any other,
// and every decision of it (the tick's, Get's, List's) carries Advisory, so
// the sender can leave it alone; a target that stops being advisory is
// actuated again.
func TestAdvisoryDecisionsSaySo(t *testing.T) {
	e, _ := newEngine(t)
	kafka := Target{Namespace: "shop", Name: "billing-0123456789", APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject"}
	spec := Spec{Target: kafka, Strategy: Lag, Annotations: map[string]string{"lag.tidal.dev/mode": "keda", "lag.tidal.dev/pollingInterval": "1"}, Advisory: true}
	if err := e.Upsert(spec, epoch); err != nil {
		t.Fatal(err)
	}
	parts := []lag.Partition{{ID: 0, End: 500, Committed: 100, HasCommitted: true}}
	var ticked []Decision
	for s := range 3 {
		now := epoch.Add(time.Duration(s) * time.Second)
		if _, err := e.Record(kafka, Sample{At: now, Partitions: parts, PartitionCount: 1, ReadyPods: -1}, now); err != nil {
			t.Fatal(err)
		}
		ticked = append(ticked, e.Tick(now)...)
	}
	if len(ticked) == 0 {
		t.Fatal("no decision reported for an active advisory target")
	}
	for _, d := range ticked {
		if !d.Advisory || !d.Valid() {
			t.Errorf("tick decision %+v: want a valid advisory decision", d)
		}
	}
	if d, ok := e.Get(kafka); !ok || !d.Advisory || d.Lag == nil || !d.Lag.KEDA.Active {
		t.Errorf("Get = %+v, %v; want the advisory target's active keda decision", d, ok)
	}
	if ds := e.List("shop"); len(ds) != 1 || !ds[0].Advisory {
		t.Errorf("List = %+v, want the one advisory decision", ds)
	}

	spec.Advisory = false
	if err := e.Upsert(spec, epoch.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Get(kafka); d.Advisory {
		t.Errorf("after the spec dropped advisory: Get = %+v, want it actuated", d)
	}
}
