package sim

import "math"

// rateBins is the resolution of Rates: a rate is kept to 0.01 %.
const rateBins = 10_000

// Rates counts per-target rates in [0, 1] (each target's share of requests
// that found no warm pod) in constant memory, for their distribution over
// thousands of functions: quantiles are nearest-rank, to 0.01 %.
type Rates struct {
	counts []uint64 // rateBins+1 once the first rate is added
	n      uint64
}

// Add counts one rate; it is clamped to [0, 1], and NaN is ignored.
func (h *Rates) Add(rate float64) {
	if math.IsNaN(rate) {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, rateBins+1)
	}
	h.counts[int(math.Round(min(max(rate, 0), 1)*rateBins))]++
	h.n++
}

// Merge adds o's rates.
func (h *Rates) Merge(o *Rates) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, rateBins+1)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Len is the number of rates counted.
func (h *Rates) Len() int { return int(h.n) }

// Quantile is the q-quantile (nearest rank) of the rates; 0 when there are
// none.
func (h *Rates) Quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return float64(i) / rateBins
		}
	}
	return 1
}
