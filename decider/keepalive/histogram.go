package keepalive

import (
	"fmt"
	"math"
	"time"
)

// The histogram's shape and the policy's constants, the paper's (§4.2).
const (
	// BinWidth is one bin of the idle-time histogram.
	BinWidth = time.Minute
	// Bins is the number of bins: the histogram's range is four hours.
	Bins = 240
	// Range is the longest idle time the histogram places in a bin; longer
	// ones are counted as out of range.
	Range = Bins * BinWidth

	// HeadQuantile and TailQuantile are the percentiles that bound the
	// predicted arrival: pre-warm before the head, keep warm past the tail.
	HeadQuantile = 0.05
	TailQuantile = 0.99
	// Margin widens the warm window on both sides: the pre-warm comes 10 %
	// before the head, the pod stays 10 % past the tail.
	Margin = 0.10

	// MinSamples is the fewest idle times the policy predicts from.
	MinSamples = 10
	// MinCV is the lowest coefficient of variation of the bin counts that
	// counts as predictable (the paper's test of a representative
	// histogram): a histogram flatter than that (idle times spread evenly
	// over more than 48 of the 240 bins) says little about when the next
	// request comes.
	MinCV = 2.0
	// MaxSpread bounds the span from the 5th percentile's bin to the 99th's:
	// 48 minutes, the spread of a flat histogram whose CV is MinCV. The CV
	// alone cannot tell a spread-out pattern from sampling noise when there
	// are few idle times (ten idle times in ten bins anywhere in the four
	// hours have a CV of 4.8); the span can.
	MaxSpread = 48 * time.Minute
	// MaxSamples bounds the idle times the histogram holds: when a new one
	// would exceed it, every count is halved, so the histogram follows a
	// pattern that changes and its counts fit 10 bits.
	MaxSamples = 1024
)

// Histogram counts idle times in minute bins, plus those out of range.
// The zero value is empty and ready to use.
type Histogram struct {
	counts [Bins]uint16
	// oob counts idle times of Range or more.
	oob uint16
	// total is the sum of counts and oob.
	total uint16
}

// Add counts one idle time; a negative one is ignored.
func (h *Histogram) Add(idle time.Duration) {
	if idle < 0 {
		return
	}
	if h.total >= MaxSamples {
		h.halve()
	}
	if idle >= Range {
		h.oob++
	} else {
		h.counts[idle/BinWidth]++
	}
	h.total++
}

// halve halves every count, rounding down, so older idle times weigh half
// as much as the ones that follow.
func (h *Histogram) halve() {
	h.total = 0
	for i := range h.counts {
		h.counts[i] /= 2
		h.total += h.counts[i]
	}
	h.oob /= 2
	h.total += h.oob
}

// Len is the number of idle times the histogram holds (after halvings).
func (h *Histogram) Len() int { return int(h.total) }

// OutOfRange is the number of idle times of Range or more.
func (h *Histogram) OutOfRange() int { return int(h.oob) }

// Count is the number of idle times in bin i ([i, i+1) minutes).
func (h *Histogram) Count(i int) int { return int(h.counts[i]) }

// quantileBin returns the bin that holds the q-quantile idle time by
// nearest rank, or Bins when it is out of range.
func (h *Histogram) quantileBin(q float64) int {
	rank := max(int(math.Ceil(q*float64(h.total))), 1)
	seen := 0
	for i, c := range h.counts {
		if seen += int(c); seen >= rank {
			return i
		}
	}
	return Bins
}

// CV is the coefficient of variation of the in-range bin counts (their
// standard deviation over their mean); 0 for an empty histogram.
func (h *Histogram) CV() float64 {
	in := int(h.total) - int(h.oob)
	if in <= 0 {
		return 0
	}
	mean := float64(in) / Bins
	var ss float64
	for _, c := range h.counts {
		d := float64(c) - mean
		ss += d * d
	}
	return math.Sqrt(ss/Bins) / mean
}

// Fallback says why idle times are not predictable; Predictable (0) when
// they are.
type Fallback uint8

const (
	// Predictable: the policy decides while the target is idle.
	Predictable Fallback = iota
	// FewSamples: fewer than MinSamples idle times.
	FewSamples
	// TooWide: the bin counts' coefficient of variation is below MinCV, or
	// the 5th to 99th percentiles span more than MaxSpread.
	TooWide
	// OutOfRange: the tail percentile lies beyond the histogram's range.
	OutOfRange
)

func (f Fallback) String() string {
	switch f {
	case Predictable:
		return "predictable"
	case FewSamples:
		return "too few idle times"
	case TooWide:
		return "too wide"
	case OutOfRange:
		return "out of range"
	default:
		return fmt.Sprintf("Fallback(%d)", uint8(f))
	}
}

// Prediction is what the histogram says of the next idle time.
type Prediction struct {
	// Fallback is Predictable, or why the policy stands aside.
	Fallback Fallback
	// Samples is the number of idle times; OutOfRange those beyond Range.
	Samples, OutOfRange int
	// CV is the bin counts' coefficient of variation.
	CV float64
	// Head is the lower edge of the bin of the 5th percentile and Tail the
	// upper edge of the bin of the 99th, when HeadKnown and TailKnown: some
	// idle times, and the percentile within the histogram's range.
	Head, Tail           time.Duration
	HeadKnown, TailKnown bool
	// PreWarm is how long after a busy period ends the pod comes back
	// (Head less the margin); 0 means the pod is kept from the end of the
	// busy period (the head falls in the first minute). Until is how long
	// after it ends the pod is kept (Tail plus the margin). Set when
	// Predictable.
	PreWarm, Until time.Duration
}

// Predictable reports whether the policy decides from the prediction.
func (p *Prediction) Predictable() bool { return p.Fallback == Predictable }

// Predict reads the histogram.
func (h *Histogram) Predict() Prediction {
	p := Prediction{Samples: h.Len(), OutOfRange: h.OutOfRange(), CV: h.CV()}
	if p.Samples == 0 {
		p.Fallback = FewSamples
		return p
	}
	head, tail := h.quantileBin(HeadQuantile), h.quantileBin(TailQuantile)
	if head < Bins {
		p.Head, p.HeadKnown = time.Duration(head)*BinWidth, true
	}
	if tail < Bins {
		p.Tail, p.TailKnown = time.Duration(tail+1)*BinWidth, true
	}
	switch {
	case p.Samples < MinSamples:
		p.Fallback = FewSamples
	case tail >= Bins:
		p.Fallback = OutOfRange
	case p.CV < MinCV-1e-9, p.Tail-p.Head > MaxSpread: // an even spread over 48 bins is 2 give or take rounding
		p.Fallback = TooWide
	default:
		p.PreWarm = scale(p.Head, 1-Margin)
		p.Until = scale(p.Tail, 1+Margin)
	}
	return p
}

// scale multiplies d by f, to the second.
func scale(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * f).Round(time.Second)
}
