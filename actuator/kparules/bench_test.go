package kparules

import (
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// BenchmarkReconcile times the pure part of one reconcile of an inactive
// revision waiting out its grace period (the branch with the most work).
func BenchmarkReconcile(b *testing.B) {
	rev, err := kpaconfig.NewRevision(kpaconfig.Default(), kpaconfig.DefaultDeployment(), nil, 0, true)
	if err != nil {
		b.Fatal(err)
	}
	in := Input{
		Revision:               rev,
		Reachability:           Reachable,
		Active:                 Condition{Status: ConditionFalse, Reason: ReasonNoTraffic},
		ActiveAge:              5 * time.Second,
		ScaleTargetInitialized: true,
		ServiceNameSet:         true,
		SKS:                    &SKS{Mode: SKSProxy, PrivateServiceNameSet: true, ProxyFor: 5 * time.Second},
		Replicas:               i32(1),
		ReadyPods:              1,
		Decider:                kpaspec.Status{DesiredScale: 0, ExcessBurstCapacity: -201},
	}
	probe := func() bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		if r := Reconcile(in, probe); r.Patch != nil {
			b.Fatal("patched during the grace period")
		}
	}
}
