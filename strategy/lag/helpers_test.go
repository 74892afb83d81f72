package lag

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// epoch is the synthetic clock's zero; tick k happens at epoch + k*tick.
var epoch = time.Date(2018, 3, 21, 0, 0, 0, 0, time.UTC)

// riffConfig returns a riff config with a Topic resource of n partitions.
func riffConfig(mode lagconfig.Mode, faithful bool, partitions int32, idle time.Duration) lagconfig.Config {
	c := lagconfig.DefaultConfig(mode)
	c.Faithful = faithful
	c.DeclaredPartitions = partitions
	c.IdleTimeout = idle
	c.Topic = "in"
	return c
}

// replay runs ticks 1..n at tick intervals, asking gen for each input.
func replay(t *testing.T, cfg lagconfig.Config, n int, gen func(k int) Input) []Decision {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	out := make([]Decision, 0, n)
	for k := 1; k <= n; k++ {
		in := gen(k)
		d := s.Decide(&in, epoch.Add(time.Duration(k)*cfg.TickInterval))
		d.Partitions = append([]PartitionLag(nil), d.Partitions...)
		out = append(out, d)
	}
	return out
}

// ranges renders the desired counts as the vectors' README does:
// "1-4:1, 5-14:2".
func ranges(ds []Decision) string {
	var b strings.Builder
	start := 0
	for i := 1; i <= len(ds); i++ {
		if i == len(ds) || ds[i].Desired != ds[start].Desired {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d-%d:%d", start+1, i, ds[start].Desired)
			start = i
		}
	}
	return b.String()
}

// parts builds partitions 0..n-1 from (end, committed) pairs; committed -1
// means none.
func parts(pairs ...int64) []Partition {
	var out []Partition
	for i := 0; i+1 < len(pairs); i += 2 {
		p := Partition{ID: int32(i / 2), End: pairs[i]}
		if pairs[i+1] >= 0 {
			p.Committed, p.HasCommitted = pairs[i+1], true
		}
		out = append(out, p)
	}
	return out
}
