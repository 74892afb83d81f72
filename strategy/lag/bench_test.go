package lag

import (
	"fmt"
	"testing"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// benchSet builds n targets of mode with 12 partitions each, every one with
// some lag, and the per-target inputs the shell would report.
func benchSet(b *testing.B, mode lagconfig.Mode, n int) (*Set, []string, []Input) {
	b.Helper()
	s := NewSet()
	keys := make([]string, n)
	ins := make([]Input, n)
	cfg := lagconfig.DefaultConfig(mode)
	cfg.DeclaredPartitions = 12
	cfg.ExcludePersistentLag = mode == lagconfig.ModeKEDA
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%d/fn-%d", i%100, i)
		if err := s.Upsert(keys[i], cfg); err != nil {
			b.Fatal(err)
		}
		in := Input{PartitionCount: 12, Replicas: 1, ReplicasKnown: true}
		for p := 0; p < 12; p++ {
			in.Partitions = append(in.Partitions, Partition{ID: int32(p), End: int64(1000 + p), Committed: int64(990 + i%7), HasCommitted: true})
		}
		ins[i] = in
	}
	return s, keys, ins
}

// advance moves every partition's offsets on, as a busy consumer would.
func advance(in *Input) {
	for p := range in.Partitions {
		in.Partitions[p].End += 3
		in.Partitions[p].Committed += 3
	}
}

// BenchmarkTick is one tick over n lag targets with 12 partitions each: the
// shell's Observe for every target, then one Tick.
func BenchmarkTick(b *testing.B) {
	for _, mode := range allModes {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("mode=%s/targets=%d", mode, n), func(b *testing.B) {
				s, keys, ins := benchSet(b, mode, n)
				out := make([]Result, 0, n)
				now := epoch
				warm := func() {
					for i := range keys {
						advance(&ins[i])
						_ = s.Observe(keys[i], ins[i])
					}
					now = now.Add(lagconfig.DefaultConfig(mode).TickInterval) // every target is due
					out = s.Tick(now, out[:0])
				}
				warm() // first tick sizes every buffer
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					warm()
				}
			})
		}
	}
}

// BenchmarkTickOnly times Tick alone (the decisions), with observation
// outside the timer.
func BenchmarkTickOnly(b *testing.B) {
	for _, mode := range allModes {
		b.Run(fmt.Sprintf("mode=%s/targets=10000", mode), func(b *testing.B) {
			s, keys, ins := benchSet(b, mode, 10000)
			out := make([]Result, 0, len(keys))
			now := epoch
			observe := func() {
				for i := range keys {
					advance(&ins[i])
					_ = s.Observe(keys[i], ins[i])
				}
			}
			observe()
			out = s.Tick(now, out[:0])
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				observe()
				now = now.Add(lagconfig.DefaultConfig(mode).TickInterval)
				b.StartTimer()
				out = s.Tick(now, out[:0])
			}
		})
	}
}
