package podmodel

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every duration lands in a bucket whose upper edge is at or above it and
	// within 1/histSub of it, and buckets are ordered.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(rng.Int64N(int64(48 * time.Hour)))
		if rng.IntN(4) == 0 {
			d = time.Duration(rng.Int64N(1000))
		}
		i := histIndex(d)
		up := histUpper(i)
		if up < d {
			t.Fatalf("histUpper(histIndex(%d)) = %d, below the duration", d, up)
		}
		if float64(up-d) > float64(d)/histSub+1 {
			t.Fatalf("histUpper(histIndex(%d)) = %d: more than 1/%d above", d, up, histSub)
		}
		if i > 0 && histUpper(i-1) >= d {
			t.Fatalf("duration %d also fits bucket %d below its own %d", d, i-1, i)
		}
	}
	if got := histIndex(time.Duration(1<<63 - 1)); got >= histBuckets {
		t.Fatalf("histIndex(max) = %d, want < %d", got, histBuckets)
	}
}

func TestHistogramMatchesExactSummary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h Histogram
	var all []time.Duration
	for range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond))
		if rng.IntN(3) == 0 {
			d = 0
		}
		h.Add(d)
		all = append(all, d)
	}
	exact := summarise(all)
	got := h.Stats()
	if got.Count != exact.Count || got.Max != exact.Max || got.Mean != exact.Mean {
		t.Fatalf("count/max/mean = %d/%s/%s, want %d/%s/%s", got.Count, got.Max, got.Mean, exact.Count, exact.Max, exact.Mean)
	}
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{{"p50", got.P50, exact.P50}, {"p90", got.P90, exact.P90}, {"p99", got.P99, exact.P99}} {
		if c.got < c.want || float64(c.got-c.want) > float64(c.want)/histSub+1 {
			t.Errorf("%s = %s, want %s within +1/%d", c.name, c.got, c.want, histSub)
		}
	}
	var a, b Histogram
	for i, d := range all {
		if i%2 == 0 {
			a.Add(d)
		} else {
			b.Add(d)
		}
	}
	a.Merge(&b)
	if a.Stats() != got {
		t.Fatalf("merged halves = %+v, want %+v", a.Stats(), got)
	}
}

func TestInServiceHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var h inService
	var popped []time.Duration
	for range 2000 {
		if len(h) > 0 && rng.IntN(3) == 0 {
			popped = append(popped, h.pop().finish)
			continue
		}
		h.push(request{finish: time.Duration(rng.Int64N(1000)) + time.Duration(len(popped))*1000})
	}
	for len(h) > 0 {
		last := h.pop().finish
		if len(h) > 0 && h[0].finish < last {
			t.Fatalf("popped %s, then the heap's top is %s", last, h[0].finish)
		}
	}
}
