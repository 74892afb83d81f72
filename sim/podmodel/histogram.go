package podmodel

import (
	"math/bits"
	"time"
)

// histSub is the sub-buckets per power of two: a recorded duration is kept
// to within 1/histSub (1.6 %) of its value; durations under histSub
// nanoseconds are kept exactly.
const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

// Histogram counts durations in log-linear buckets, in constant memory
// (about 30 KiB) however many it holds: what a model with BoundedStats
// keeps in place of every wait, and what the simulator merges across
// targets. Quantiles are nearest-rank, reported as the upper edge of the
// bucket holding them (never above the largest recorded); Max and Mean are
// exact.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

func histIndex(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < histSub {
		return int(v)
	}
	exp := bits.Len64(v) - histSubBits // ≥ 1
	return exp*histSub + int(v>>uint(exp-1)) - histSub
}

// histUpper is the largest duration of bucket i.
func histUpper(i int) time.Duration {
	if i < histSub {
		return time.Duration(i)
	}
	exp := i / histSub
	mant := uint64(i%histSub) + histSub
	return time.Duration((mant+1)<<uint(exp-1) - 1)
}

// Add records one duration; negative ones count as 0.
func (h *Histogram) Add(d time.Duration) {
	d = max(d, 0)
	h.counts[histIndex(d)]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// AddN records n equal durations.
func (h *Histogram) AddN(d time.Duration, n uint64) {
	if n == 0 {
		return
	}
	d = max(d, 0)
	h.counts[histIndex(d)] += n
	h.n += n
	h.sum += d * time.Duration(n)
	h.max = max(h.max, d)
}

// Merge adds every duration of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1); 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++ // ceil
	}
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// Stats summarises the histogram as WaitStats.
func (h *Histogram) Stats() WaitStats {
	if h.n == 0 {
		return WaitStats{}
	}
	return WaitStats{
		Count: int(h.n), Mean: h.sum / time.Duration(h.n),
		P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99), Max: h.max,
	}
}
