package engine

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/lag"
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

// BenchmarkTick is the engine's side of test/benchknative's tick benchmark,
// kept here so that it can be profiled without Knative: N targets (10 per
// namespace, one ready pod, concurrency 40–58, each deciding 1) with 180 s
// of one sample per second, then per op one 2 s period: two samples per
// target recorded (untimed in tick-cpu-ms), then the tick that applies them
// and decides.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := New(Config{TickInterval: 2 * time.Second, KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment()})
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Namespace: fmt.Sprintf("ns-%d", i/10), Name: fmt.Sprintf("rev-%d", i)}
				if err := e.Upsert(Spec{Target: targets[i], Strategy: KPA, Reachable: true}, epoch); err != nil {
					b.Fatal(err)
				}
			}
			record := func(s int) {
				t := epoch.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
				for i, tg := range targets {
					smp := Sample{At: t, Stat: kpa.Stat{AverageConcurrentRequests: float64(40 + i%19)}, ReadyPods: 1}
					if _, err := e.Record(tg, smp, t); err != nil {
						b.Fatal(err)
					}
				}
			}
			const filled = 180
			for s := range filled {
				record(s)
				if s%2 == 1 {
					e.Tick(epoch.Add(time.Duration(s+1) * time.Second))
				}
			}
			s := filled
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				record(s)
				record(s + 1)
				s += 2
				c0 := processCPU(b)
				e.Tick(epoch.Add(time.Duration(s) * time.Second))
				cpu += processCPU(b) - c0
			}
			for _, tg := range []Target{targets[0], targets[n-1]} {
				if d, _ := e.Get(tg); d.Desired != 1 || d.At != epoch.Add(time.Duration(s)*time.Second) {
					b.Fatalf("%s: desired %d at %v, want 1 at %v", tg.Key(), d.Desired, d.At, epoch.Add(time.Duration(s)*time.Second))
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/1e6/float64(b.N), "tick-cpu-ms")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "tick-cpu-ns/target")
		})
	}
}

// processCPU returns the process's user and system CPU time so far: on a
// shared machine it is steadier than wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLagSecond is one second of a decider's life over N lag targets of
// ten partitions each at a steady lag: one sample per target and ten runs of
// the 100 ms tick loop (lag targets tick every second by default).
func BenchmarkLagSecond(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := New(Config{TickInterval: 2 * time.Second, KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment()})
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Namespace: "ns", Name: fmt.Sprintf("fn%d", i)}
				if err := e.Upsert(Spec{Target: targets[i], Strategy: Lag}, epoch); err != nil {
					b.Fatal(err)
				}
			}
			parts := make([]lag.Partition, 10)
			for p := range parts {
				parts[p] = lag.Partition{ID: int32(p), End: 1000, Committed: 900, HasCommitted: true}
			}
			// Steady state: the targets run the replicas they want, so a
			// tick changes nothing and reports nothing.
			ready := int32(1)
			const warm = 30 // seconds for the smoothed proposal to settle
			for s := range warm {
				sec := epoch.Add(time.Duration(s-warm) * time.Second)
				for _, t := range targets {
					at := sec.Add(500 * time.Millisecond)
					_, _ = e.Record(t, Sample{At: at, Partitions: parts, PartitionCount: 10, ReadyPods: ready}, at)
				}
				for ms := 0; ms < 1000; ms += 100 {
					e.Tick(sec.Add(time.Duration(ms) * time.Millisecond))
				}
				d, _ := e.Get(targets[0])
				ready = d.Desired
			}
			if ready <= 0 {
				b.Fatalf("desired %d at a steady lag", ready)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				sec := epoch.Add(time.Duration(i) * time.Second)
				for _, t := range targets {
					at := sec.Add(500 * time.Millisecond)
					_, _ = e.Record(t, Sample{At: at, Partitions: parts, PartitionCount: 10, ReadyPods: ready}, at)
				}
				for ms := 0; ms < 1000; ms += 100 {
					e.Tick(sec.Add(time.Duration(ms) * time.Millisecond))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/target-second")
		})
	}
}

// BenchmarkPage is one listing of every decision of N decided KPA targets,
// a page of 1,000 at a time, as a dashboard polling ListDecisions makes it.
func BenchmarkPage(b *testing.B) {
	const n = 10_000
	e := New(Config{TickInterval: 2 * time.Second, KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment()})
	for i := range n {
		t := Target{Namespace: fmt.Sprintf("ns-%d", i/10), Name: fmt.Sprintf("rev-%d", i)}
		if err := e.Upsert(Spec{Target: t, Strategy: KPA, Reachable: true}, epoch); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Record(t, Sample{At: epoch.Add(time.Second), Stat: kpa.Stat{AverageConcurrentRequests: 50}, ReadyPods: 1}, epoch.Add(time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	e.Tick(epoch.Add(4 * time.Second))
	x := NewIndex(e, time.Minute, func() time.Time { return epoch })
	b.ReportAllocs()
	for b.Loop() {
		listed := 0
		for after := ""; ; {
			ds, next := x.Page("", after, 1000)
			listed += len(ds)
			if next == "" {
				break
			}
			after = next
		}
		if listed != n {
			b.Fatalf("listed %d, want %d", listed, n)
		}
	}
}
