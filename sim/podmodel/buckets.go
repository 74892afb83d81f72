package podmodel

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// MaxBucketCount bounds the arrivals of one bucket of a Buckets profile: a
// bucket's arrival times are held while it is replayed (8 bytes each).
const MaxBucketCount = 1 << 22

// Buckets is an Arrivals profile of counts per fixed-width bucket: Counts[i]
// arrivals during [i·Width, (i+1)·Width). Each bucket's arrivals are placed at
// independent uniform random times within it, then sorted: the arrival times
// of a Poisson process given the bucket's count, so a bucket's total is kept
// exactly and nothing is assumed about its shape. The placement depends only
// on Seed and the bucket's index (a PCG stream per bucket), so the same
// counts and seed give the same arrivals, byte for byte.
//
// A Buckets is consumed by Pop; build a new one for every model.
type Buckets struct {
	Width  time.Duration
	Counts []int64
	Seed   uint64

	i   int             // the bucket buf holds, or the next to load
	buf []time.Duration // the bucket's arrival times, sorted
	j   int             // the next of buf to pop
}

// Rate implements Profile: the bucket's count over its width.
func (b *Buckets) Rate(elapsed time.Duration) float64 {
	if elapsed < 0 || b.Width <= 0 {
		return 0
	}
	i := int(elapsed / b.Width)
	if i >= len(b.Counts) {
		return 0
	}
	return float64(b.Counts[i]) / b.Width.Seconds()
}

// Pop implements Arrivals.
func (b *Buckets) Pop() (time.Duration, bool) {
	for b.j >= len(b.buf) {
		if b.i >= len(b.Counts) || b.Width <= 0 {
			return 0, false
		}
		b.load(b.i)
		b.i++
	}
	at := b.buf[b.j]
	b.j++
	return at, true
}

func (b *Buckets) load(i int) {
	n := int(min(max(b.Counts[i], 0), MaxBucketCount))
	b.buf, b.j = b.buf[:0], 0
	if n == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(b.Seed, uint64(i)))
	base := time.Duration(i) * b.Width
	for range n {
		b.buf = append(b.buf, base+time.Duration(rng.Int64N(int64(b.Width))))
	}
	slices.Sort(b.buf)
}

// CountsFromRates turns per-bucket rates (per second, over buckets of width)
// into whole counts, carrying each bucket's fraction into the next, so the
// total is kept to within one arrival and the result is deterministic.
func CountsFromRates(rates []float64, width time.Duration) []int64 {
	out := make([]int64, len(rates))
	carry := 0.0
	for i, r := range rates {
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			r = 0
		}
		carry += r * width.Seconds()
		// The epsilon keeps ten buckets of 0.1 from summing to 0.999….
		n := math.Floor(carry + 1e-9)
		out[i] = int64(n)
		carry = max(carry-n, 0)
	}
	return out
}
