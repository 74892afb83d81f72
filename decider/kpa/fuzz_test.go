package kpa

import (
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/window"
)

// FuzzDecider feeds arbitrary stats, timestamps and ready counts to a target
// and checks that it never panics and never reports a negative scale other
// than -1.
func FuzzDecider(f *testing.F) {
	f.Add(21.0, 0.0, 5.0, 0.0, int64(500), int32(1), uint8(0), int64(2000))
	f.Add(-1.0, 2.0, 1e300, 3.0, int64(-70000), int32(-3), uint8(1), int64(0))
	f.Add(1e12, 1e12, 0.0, 0.0, int64(1<<40), int32(1<<30), uint8(3), int64(-1<<40))
	f.Fuzz(func(t *testing.T, c, pc, rc, prc float64, atMs int64, ready int32, flags uint8, tickMs int64) {
		spec := testSpec()
		if flags&1 != 0 {
			spec.ScalingMetric = RPS
		}
		if flags&2 != 0 {
			spec.Aggregation = window.WeightedExponential
		}
		if flags&4 != 0 {
			spec.TargetBurstCapacity = -1
			spec.Scraped = false
		}
		if flags&8 != 0 {
			spec.ScaleDownDelay = 30 * time.Second
			spec.ActivationScale = 3
		}
		a, err := New(spec, epoch, max(ready, 0))
		if err != nil {
			t.Fatal(err)
		}
		now := epoch.Add(time.Minute)
		for i := range 4 {
			at := now.Add(time.Duration(atMs) * time.Millisecond / time.Duration(i+1))
			poke, _, _ := a.Record(at, now, Stat{c, pc, rc, prc}, Source(i%2))
			if poke {
				a.Scale(now, ready, TriggerPoke)
			}
			d, _ := a.Scale(now.Add(time.Duration(tickMs)*time.Millisecond), ready, TriggerTick)
			if d.Desired < 0 || a.Status().DesiredScale < ScaleUnknown {
				t.Fatalf("desired %d status %+v\n%s", d.Desired, a.Status(), d.Explain())
			}
			_ = d.Reason()
			now = now.Add(2 * time.Second)
		}
	})
}
