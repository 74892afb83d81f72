package window

import (
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// The algorithm and sizes are part of a target's KPA spec, shared with
// the other services.
type (
	// Algorithm selects how a Window averages its buckets.
	Algorithm = kpaspec.Algorithm
)

const (
	// Linear is Knative's default averaging.
	Linear = kpaspec.Linear
	// WeightedExponential weights newer buckets more.
	WeightedExponential = kpaspec.WeightedExponential
	// BucketSize is the granularity of every window.
	BucketSize = kpaspec.BucketSize
	// MaxLength bounds a window's length.
	MaxLength = kpaspec.MaxWindow
)

const (
	// minSmoothing is the smallest decay coefficient of the weighted average.
	minSmoothing = 0.2
	// targetWeight is the share of the total weight that the window's buckets
	// must hold; it sets the coefficient for short windows.
	targetWeight = 0.9999
)

// Window is a ring of one-second buckets covering the last Len() seconds.
//
// The zero value is not usable; build one with New or Init. A Window is not
// safe for concurrent use: its owner serialises access.
type Window struct {
	// buckets[s mod len] holds the sum of the values recorded in Unix second s.
	buckets []float64
	// first is the oldest second that may hold data (valid when hasFirst).
	first int64
	// last is the newest second written and lastIdx its bucket (valid when
	// hasLast). Buckets are found by stepping from lastIdx rather than by
	// taking a second modulo the length: a 64-bit division costs more than
	// the rest of a Record.
	last    int64
	lastIdx int
	// total is the running sum of all buckets, kept for the linear average.
	total float64
	// next is the value in the bucket of second last+1, the oldest one: the
	// usual average, one second after the newest write, subtracts it without
	// touching the bucket array (one cache miss less per target and tick).
	next     float64
	algo     Algorithm
	hasFirst bool
	hasLast  bool
}

// Buckets returns the number of one-second buckets a window of the given
// length needs: ⌈length / 1 s⌉.
func Buckets(length time.Duration) int {
	return int((length + BucketSize - 1) / BucketSize)
}

// New returns an empty window of the given length, rounded up to whole
// seconds. It fails if length is not in (0, MaxLength].
func New(length time.Duration, algo Algorithm) (*Window, error) {
	w := &Window{}
	if err := w.Init(length, algo, nil); err != nil {
		return nil, err
	}
	return w, nil
}

// Init makes w an empty window of the given length, using buf for its buckets
// when buf has exactly Buckets(length) elements (so that a caller can carve
// several windows out of one allocation), else allocating them.
func (w *Window) Init(length time.Duration, algo Algorithm, buf []float64) error {
	if err := checkLength(length); err != nil {
		return err
	}
	if algo != Linear && algo != WeightedExponential {
		return fmt.Errorf("window algorithm %d: want linear or weighted-exponential", algo)
	}
	n := Buckets(length)
	if len(buf) != n {
		buf = make([]float64, n)
	} else {
		clear(buf)
	}
	*w = Window{buckets: buf, algo: algo}
	return nil
}

func checkLength(length time.Duration) error {
	if length <= 0 || length > MaxLength {
		return fmt.Errorf("window length %v: want (0s, %v]", length, MaxLength)
	}
	return nil
}

// smoothingFor is max(1 − (1 − 0.9999)^(1/n), 0.2): short windows decay fast
// enough for their buckets to hold 99.99 % of the weight.
func smoothingFor(n int) float64 {
	if n < len(smoothingTable) {
		return smoothingTable[n]
	}
	// 1 − 10⁻⁴ᐟⁿ falls below the floor from n = 42 on.
	return minSmoothing
}

func computeSmoothing(n int) float64 {
	return math.Max(1-math.Pow(1-targetWeight, 1/float64(n)), minSmoothing)
}

// smoothingTable holds the coefficient for short windows, so that windows
// need not store it and averages need not recompute it.
var smoothingTable = func() (t [maxTabled + 1]float64) {
	for n := 1; n <= maxTabled; n++ {
		t[n] = computeSmoothing(n)
	}
	return t
}()

// maxTabled is where the coefficient reaches its floor for good.
const maxTabled = 64

// Len returns the window's length.
func (w *Window) Len() time.Duration { return time.Duration(len(w.buckets)) * BucketSize }

// Algorithm returns the window's averaging algorithm.
func (w *Window) Algorithm() Algorithm { return w.algo }

// slot maps a Unix second to its bucket.
func (w *Window) slot(sec int64) int {
	n := int64(len(w.buckets))
	i := sec % n
	if i < 0 {
		i += n
	}
	return int(i)
}

// step returns the bucket d seconds after (d < 0: before) the one at index
// i, for |d| < len(buckets).
func (w *Window) step(i int, d int) int {
	i += d
	switch n := len(w.buckets); {
	case i >= n:
		i -= n
	case i < 0:
		i += n
	}
	return i
}

// Record adds v to the bucket of second t. A value older than one window
// before the newest write is dropped, and Record reports false; a value inside
// the window but older than the newest write is added to its own bucket.
func (w *Window) Record(t time.Time, v float64) bool {
	return w.RecordSecond(t.Unix(), v)
}

// RecordSecond is Record for a time given as Unix seconds.
func (w *Window) RecordSecond(b int64, v float64) bool {
	n := int64(len(w.buckets))
	if !w.hasLast || b != w.last {
		if w.hasLast && b+n <= w.last {
			return false
		}
		if !w.hasFirst || w.first > b {
			w.first, w.hasFirst = b, true
		}
		if !w.hasLast || b > w.last {
			if !w.hasLast || b-w.last >= n {
				// A whole window of silence (or the first write): start afresh.
				clear(w.buckets)
				w.total = 0
				w.first, w.hasFirst = b, true
				w.lastIdx = w.slot(b)
			} else {
				// Clear the buckets skipped since the last write.
				i := w.lastIdx
				for range b - w.last {
					i = w.step(i, 1)
					w.total -= w.buckets[i]
					w.buckets[i] = 0
				}
				w.lastIdx = i
			}
			w.last, w.hasLast = b, true
		}
	}
	// b is in (last − n, last]: a late value lands that far behind lastIdx.
	w.buckets[w.step(w.lastIdx, int(b-w.last))] += v
	w.total += v
	w.next = w.buckets[w.step(w.lastIdx, 1)]
	return true
}

// IsEmpty reports whether nothing was written in the window ending at now:
// true when now − newest write > length (strict), or when nothing was ever
// written.
func (w *Window) IsEmpty(now time.Time) bool {
	return !w.hasLast || now.Unix()-w.last > int64(len(w.buckets))
}

// Average returns the window's average at now with the window's algorithm.
func (w *Window) Average(now time.Time) float64 {
	if w.algo == WeightedExponential {
		return w.weightedAverage(now.Unix())
	}
	return w.linearAverage(now.Unix())
}

func (w *Window) linearAverage(now int64) float64 {
	if !w.hasLast {
		return 0
	}
	n := int64(len(w.buckets))
	d := now - w.last
	switch {
	case d <= 0:
		return round6(w.total / w.divisor(n))
	case d < n:
		// The buckets after the newest write are stale: drop them from the sum
		// and from the divisor, so that the average holds over trailing gaps.
		sum := w.total
		if d == 1 {
			sum -= w.next
		} else {
			for i, k := w.lastIdx, int64(0); k < d; k++ {
				i = w.step(i, 1)
				sum -= w.buckets[i]
			}
		}
		return round6(sum / w.divisor(n-d))
	default:
		return 0
	}
}

// divisor is the number of buckets written since the first write, at most
// limit: the partial-window correction.
func (w *Window) divisor(limit int64) float64 {
	if !w.hasFirst {
		return float64(limit)
	}
	return math.Min(float64(w.last-w.first)+1, float64(limit))
}

func (w *Window) weightedAverage(now int64) float64 {
	n := int64(len(w.buckets))
	if !w.hasLast || now-w.last > n {
		return 0
	}
	numB := n
	sm := smoothingFor(len(w.buckets))
	m := sm
	if now > w.last {
		z := now - w.last
		m *= math.Pow(1-sm, float64(z))
		numB -= z
	}
	sum := 0.0
	for i, k := w.lastIdx, int64(0); k < numB; k++ {
		sum += w.buckets[i] * m
		m *= 1 - sm
		i = w.step(i, -1)
	}
	return sum
}

// round6 rounds half away from zero to 6 decimal places.
func round6(f float64) float64 {
	const p = 1e6
	return math.Round(f*p) / p
}

// Resize changes the window's length (and algorithm), keeping the data of the
// newest min(old, new) seconds when the window held data at now, else
// emptying it. It reuses the bucket storage when the bucket count is
// unchanged.
func (w *Window) Resize(length time.Duration, algo Algorithm, now time.Time) error {
	if err := checkLength(length); err != nil {
		return err
	}
	if algo != Linear && algo != WeightedExponential {
		return fmt.Errorf("window algorithm %d: want linear or weighted-exponential", algo)
	}
	n := Buckets(length)
	w.algo = algo
	if n == len(w.buckets) {
		return nil
	}
	old := w.buckets
	nb := make([]float64, n)
	total := 0.0
	if w.hasLast && now.Unix()-w.last <= int64(len(old)) {
		keep := min(n, len(old))
		for i := range keep {
			s := w.last - int64(i)
			v := old[w.slot(s)]
			nb[int(((s%int64(n))+int64(n))%int64(n))] = v
			total += v
		}
		oldest := w.last - int64(keep) + 1
		if !w.hasFirst || w.first < oldest {
			w.first, w.hasFirst = oldest, true
		}
	} else {
		w.hasFirst = false
		w.hasLast = false
	}
	w.buckets = nb
	w.total = total
	w.next = 0
	if w.hasLast {
		w.lastIdx = w.slot(w.last)
		w.next = w.buckets[w.step(w.lastIdx, 1)]
	}
	return nil
}
