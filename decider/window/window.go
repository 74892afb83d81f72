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

// Series picks one of a Window's two series.
type Series uint8

const (
	// First is the first value of each record, Second the second.
	First Series = iota
	Second
)

// Window is a ring of one-second buckets covering the last Len() seconds,
// holding two series that are always recorded at the same times (the KPA's
// concurrency and request count): each series is the window Knative keeps
// for it, and they share the bookkeeping of times, and a bucket's two values
// share a cache line, which is what a Record over many targets waits for.
//
// The zero value is not usable; build one with New or Init. A Window is not
// safe for concurrent use: its owner serialises access.
type Window struct {
	// buckets[s mod len][k] holds the sum of series k's values recorded in
	// Unix second s.
	buckets [][2]float64
	// first is the oldest second that may hold data (valid when hasFirst).
	first int64
	// last is the newest second written (valid when hasLast).
	last int64
	// total is each series' running sum of all buckets, kept for the linear
	// average.
	total [2]float64
	// next is the bucket of second last+1, the oldest one: the usual
	// average, one second after the newest write, subtracts it without
	// touching the bucket array (one cache miss less per target and tick).
	next [2]float64
	// lastIdx is the bucket of last. Buckets are found by stepping from it
	// rather than by taking a second modulo the length: a 64-bit division
	// costs more than the rest of a Record.
	lastIdx  int32
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
func (w *Window) Init(length time.Duration, algo Algorithm, buf [][2]float64) error {
	if err := checkLength(length); err != nil {
		return err
	}
	if algo != Linear && algo != WeightedExponential {
		return fmt.Errorf("window algorithm %d: want linear or weighted-exponential", algo)
	}
	n := Buckets(length)
	if len(buf) != n {
		buf = make([][2]float64, n)
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
func (w *Window) slot(sec int64) int32 {
	n := int64(len(w.buckets))
	i := sec % n
	if i < 0 {
		i += n
	}
	return int32(i)
}

// step returns the bucket d seconds after (d < 0: before) the one at index
// i, for |d| < len(buckets).
func (w *Window) step(i int32, d int32) int32 {
	i += d
	switch n := int32(len(w.buckets)); {
	case i >= n:
		i -= n
	case i < 0:
		i += n
	}
	return i
}

// Record adds v0 to the first series' bucket of second t and v1 to the
// second's. A record older than one window before the newest write is
// dropped, and Record reports false; a record inside the window but older
// than the newest write is added to its own bucket.
func (w *Window) Record(t time.Time, v0, v1 float64) bool {
	return w.RecordSecond(t.Unix(), v0, v1)
}

// RecordSecond is Record for a time given as Unix seconds.
func (w *Window) RecordSecond(b int64, v0, v1 float64) bool {
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
				w.total = [2]float64{}
				w.first, w.hasFirst = b, true
				w.lastIdx = w.slot(b)
			} else {
				// Clear the buckets skipped since the last write.
				i := w.lastIdx
				for range b - w.last {
					i = w.step(i, 1)
					bk := &w.buckets[i]
					w.total[0] -= bk[0]
					w.total[1] -= bk[1]
					*bk = [2]float64{}
				}
				w.lastIdx = i
			}
			w.last, w.hasLast = b, true
		}
	}
	// b is in (last − n, last]: a late record lands that far behind lastIdx.
	bk := &w.buckets[w.step(w.lastIdx, int32(b-w.last))]
	bk[0] += v0
	bk[1] += v1
	w.total[0] += v0
	w.total[1] += v1
	w.next = w.buckets[w.step(w.lastIdx, 1)]
	return true
}

// IsEmpty reports whether nothing was written in the window ending at now:
// true when now − newest write > length (strict), or when nothing was ever
// written.
func (w *Window) IsEmpty(now time.Time) bool {
	return !w.hasLast || now.Unix()-w.last > int64(len(w.buckets))
}

// Average returns series k's average at now with the window's algorithm.
func (w *Window) Average(now time.Time, k Series) float64 {
	if w.algo == WeightedExponential {
		return w.weightedAverage(now.Unix(), k)
	}
	return w.linearAverage(now.Unix(), k)
}

func (w *Window) linearAverage(now int64, k Series) float64 {
	if !w.hasLast {
		return 0
	}
	n := int64(len(w.buckets))
	d := now - w.last
	switch {
	case d <= 0:
		return round6(w.total[k] / w.divisor(n))
	case d < n:
		// The buckets after the newest write are stale: drop them from the sum
		// and from the divisor, so that the average holds over trailing gaps.
		sum := w.total[k]
		if d == 1 {
			sum -= w.next[k]
		} else {
			for i, s := w.lastIdx, int64(0); s < d; s++ {
				i = w.step(i, 1)
				sum -= w.buckets[i][k]
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

func (w *Window) weightedAverage(now int64, k Series) float64 {
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
	for i, s := w.lastIdx, int64(0); s < numB; s++ {
		sum += w.buckets[i][k] * m
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
	nb := make([][2]float64, n)
	var total [2]float64
	if w.hasLast && now.Unix()-w.last <= int64(len(old)) {
		keep := min(n, len(old))
		for i := range keep {
			s := w.last - int64(i)
			v := old[w.slot(s)]
			nb[int(((s%int64(n))+int64(n))%int64(n))] = v
			total[0] += v[0]
			total[1] += v[1]
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
	w.next = [2]float64{}
	if w.hasLast {
		w.lastIdx = w.slot(w.last)
		w.next = w.buckets[w.step(w.lastIdx, 1)]
	}
	return nil
}
