package kpa

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// processCPU returns the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSpec is Knative's default for a revision with containerConcurrency 0:
// target 70 per pod, total 100, TBC 211, 60 s and 6 s linear windows.
func benchSpec() Spec {
	s := testSpec()
	s.TargetValue, s.TotalValue, s.TargetBurstCapacity = 70, 100, 211
	return s
}

// fill records one stat per second at the half second for seconds [0, n),
// using c(s) as the concurrency.
func fill(b *testing.B, a *Autoscaler, n int, c func(s int) float64) {
	b.Helper()
	for s := range n {
		t := at(float64(s) + 0.5)
		if _, _, err := a.Record(t, t, Stat{AverageConcurrentRequests: c(s)}, SourceScraper); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScale times one decision for a revision with 5 ready pods after
// three stable windows of data, as Knative's own benchmark does.
func BenchmarkScale(b *testing.B) {
	cases := []struct {
		name      string
		c         func(s int) float64
		want      int32
		panicking bool
	}{
		{"steady", func(int) float64 { return 300 }, 5, false},
		{"panic", func(s int) float64 {
			if s >= 174 {
				return 1000
			}
			return 300
		}, 15, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			a, err := New(benchSpec(), epoch, 5)
			if err != nil {
				b.Fatal(err)
			}
			fill(b, a, 180, tc.c)
			now := at(180)
			// Warm up: leave the start-in-panic state, or enter panic.
			for range 3 {
				a.Scale(now, 5, TriggerTick)
			}
			if d, _ := a.Scale(now, 5, TriggerTick); d.Desired != tc.want || d.Panicking != tc.panicking {
				b.Fatalf("desired %d panicking %v, want %d %v\n%s", d.Desired, d.Panicking, tc.want, tc.panicking, d.Explain())
			}
			b.ReportAllocs()
			for b.Loop() {
				a.Scale(now, 5, TriggerTick)
			}
		})
	}
}

// BenchmarkRecord times one stat into a target's four windows through the
// Set, the timestamp advancing 1 s per call so that every call opens a new
// bucket and clears an expired one.
func BenchmarkRecord(b *testing.B) {
	s := NewSet()
	k := Key{Namespace: "ns", Name: "rev"}
	if err := s.Create(k, benchSpec(), epoch, 1); err != nil {
		b.Fatal(err)
	}
	st := Stat{AverageConcurrentRequests: 50, RequestCount: 50}
	sec := 0
	b.ReportAllocs()
	for b.Loop() {
		sec++
		t := at(float64(sec) + 0.5)
		if _, _, err := s.Record(k, t, t, st, SourceScraper); err != nil {
			b.Fatal(err)
		}
	}
}

// buildSet makes n targets of one ready pod each with concurrency 40–58
// (each decides 1 pod) and 180 s of data, and returns the live heap they
// added per target.
func buildSet(b *testing.B, n int) (*Set, float64) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewSet()
	spec := benchSpec()
	for i := range n {
		k := Key{Namespace: fmt.Sprintf("ns-%d", i/10), Name: fmt.Sprintf("rev-%d", i)}
		if err := s.Create(k, spec, epoch, 1); err != nil {
			b.Fatal(err)
		}
		e := s.byKey[k]
		c := float64(40 + i%19)
		for sec := range 180 {
			t := at(float64(sec) + 0.5)
			e.a.record(t, Stat{AverageConcurrentRequests: c})
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return s, float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkTick times one pass of the single tick loop over every target,
// and reports the live heap per target (60 s stable window, default spec).
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, heap := buildSet(b, n)
			now := at(180)
			changed := make([]Change, 0, n)
			changed = s.Tick(now, changed[:0])
			if d, _, _ := s.Get(Key{Namespace: "ns-0", Name: "rev-0"}); d.Desired != 1 {
				b.Fatalf("desired %d, want 1", d.Desired)
			}
			goroutines := runtime.NumGoroutine()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for b.Loop() {
				changed = s.Tick(now, changed[:0])
			}
			cpu := processCPU(b) - cpu0
			b.StopTimer()
			// Process CPU (user+system, GC included), as Knative's harness
			// measured it: on a shared machine it is steadier than wall time.
			b.ReportMetric(float64(cpu.Nanoseconds())/1e6/float64(b.N), "cpu-ms/tick")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/target")
			b.ReportMetric(heap, "heap-B/target")
			b.ReportMetric(float64(runtime.NumGoroutine()-goroutines), "goroutines-added")
			runtime.KeepAlive(s)
		})
	}
}

// BenchmarkPoke times what the service does for an activator stat reaching
// a target at zero: Record, then the Poke that decides 1 (Knative's poke
// latency from accept to desired > 0 is 12.7 µs p50 on this machine class).
func BenchmarkPoke(b *testing.B) {
	s := NewSet()
	k := Key{Namespace: "ns", Name: "rev"}
	if err := s.Create(k, benchSpec(), epoch, 0); err != nil {
		b.Fatal(err)
	}
	zero := at(0.5)
	if _, _, err := s.Record(k, zero, zero, Stat{}, SourceScraper); err != nil {
		b.Fatal(err)
	}
	s.Tick(at(1), nil)
	e := s.byKey[k]
	if e.a.status.DesiredScale != 0 {
		b.Fatalf("desired %d, want 0", e.a.status.DesiredScale)
	}
	one := Stat{AverageConcurrentRequests: 1, RequestCount: 1}
	sec := 0.0
	b.ReportAllocs()
	for b.Loop() {
		// Back at zero, a stable window after the last stat.
		e.a.status.DesiredScale = 0
		sec += 100
		now := at(sec)
		poke, _, err := s.Record(k, now, now, one, SourceActivator)
		if err != nil || !poke {
			b.Fatalf("poke %v err %v", poke, err)
		}
		if d, _, _ := s.Poke(k, now); d.Desired != 1 {
			b.Fatalf("desired %d, want 1", d.Desired)
		}
	}
}
