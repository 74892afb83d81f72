package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// BenchmarkEngineSecond is one second of a decider's life over N KPA
// targets: one scraped sample per target, ten runs of the 100 ms tick loop,
// and every other second a KPA decision tick.
func BenchmarkEngineSecond(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := New(Config{TickInterval: 2 * time.Second, KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment()})
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Namespace: "ns", Name: fmt.Sprintf("t%d", i)}
				if err := e.Upsert(Spec{Target: targets[i], Strategy: KPA, Reachable: true}, epoch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				sec := epoch.Add(time.Duration(i) * time.Second)
				for _, t := range targets {
					_, _ = e.Record(t, Sample{At: sec.Add(500 * time.Millisecond), Stat: kpa.Stat{AverageConcurrentRequests: 5}, ReadyPods: 1}, sec.Add(500*time.Millisecond))
				}
				for ms := 0; ms < 1000; ms += 100 {
					e.Tick(sec.Add(time.Duration(ms) * time.Millisecond))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/target-second")
		})
	}
}
