package window

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refWindow is the window of Knative's bucketing.go written as plainly as
// the rules read, for one series: buckets keyed by their Unix second in a
// map, no ring indices. It keeps the same running total, added to and
// subtracted from in the same order, so its averages must equal Window's to
// the bit; what it checks is Window's index bookkeeping (the ring position
// of each second, the stale seconds, the walk of the weighted average) and
// that its two series never mix.
type refWindow struct {
	n           int64
	algo        Algorithm
	m           map[int64]float64
	first, last int64
	has         bool // something was written; first and last are set
	total       float64
}

func newRef(length time.Duration, algo Algorithm) *refWindow {
	return &refWindow{n: int64(Buckets(length)), algo: algo, m: map[int64]float64{}}
}

func (r *refWindow) record(b int64, v float64) bool {
	if r.has && b != r.last {
		if b+r.n <= r.last {
			return false
		}
		r.first = min(r.first, b)
	}
	if !r.has || b-r.last >= r.n {
		clear(r.m)
		r.total = 0
		r.first = b
		r.last, r.has = b, true
	}
	// Seconds last+1 … b push seconds last+1−n … b−n out of the window.
	for s := r.last + 1; s <= b; s++ {
		r.total -= r.m[s-r.n]
		delete(r.m, s-r.n)
	}
	r.last = max(r.last, b)
	r.m[b] += v
	r.total += v
	return true
}

func (r *refWindow) average(now int64) float64 {
	if !r.has {
		return 0
	}
	d := now - r.last
	if r.algo == WeightedExponential {
		if d > r.n {
			return 0
		}
		sm := computeSmoothing(int(r.n))
		m, numB := sm, r.n
		if d > 0 {
			m *= math.Pow(1-sm, float64(d))
			numB -= d
		}
		sum := 0.0
		for i := range numB {
			sum += r.m[r.last-i] * m
			m *= 1 - sm
		}
		return sum
	}
	limit := r.n
	sum := r.total
	switch {
	case d >= r.n:
		return 0
	case d > 0:
		// Seconds last+1 … now are stale: their buckets still hold the
		// seconds a window earlier.
		for s := r.last + 1; s <= now; s++ {
			sum -= r.m[s-r.n]
		}
		limit = r.n - d
	}
	return round6(sum / math.Min(float64(r.last-r.first)+1, float64(limit)))
}

func (r *refWindow) isEmpty(now int64) bool { return !r.has || now-r.last > r.n }

func (r *refWindow) resize(length time.Duration, algo Algorithm, now int64) {
	n := int64(Buckets(length))
	r.algo = algo
	if n == r.n {
		return
	}
	if !r.has || now-r.last > r.n {
		*r = refWindow{n: n, algo: algo, m: map[int64]float64{}}
		return
	}
	keep := min(n, r.n)
	m := map[int64]float64{}
	r.total = 0
	for i := range keep {
		v := r.m[r.last-i]
		if v != 0 {
			m[r.last-i] = v
		}
		r.total += v
	}
	r.m, r.n = m, n
	r.first = max(r.first, r.last-keep+1)
}

// same reports whether two averages are equal to the bit (NaN included).
func same(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

var refLengths = []time.Duration{time.Second, 2 * time.Second, 6 * time.Second, 7 * time.Second, 60 * time.Second}

// checkAgainstRef runs one random history of records, averages and resizes
// through Window and a refWindow per series, and fails at the first
// difference.
func checkAgainstRef(t *testing.T, rng *rand.Rand, steps int) {
	t.Helper()
	length := refLengths[rng.IntN(len(refLengths))]
	algo := Algorithm(rng.IntN(2))
	w, err := New(length, algo)
	if err != nil {
		t.Fatal(err)
	}
	refs := [2]*refWindow{newRef(length, algo), newRef(length, algo)}
	sec := epoch.Unix() + rng.Int64N(120) - 60
	for step := range steps {
		// Mostly forward in time, sometimes back, sometimes a long gap.
		switch p := rng.IntN(100); {
		case p < 70:
			sec += rng.Int64N(3)
		case p < 90:
			sec -= rng.Int64N(70)
		default:
			sec += rng.Int64N(130)
		}
		switch p := rng.IntN(100); {
		case p < 60:
			// Values with fractions, so that the order of the sums shows.
			v0, v1 := float64(rng.IntN(2000)-200)/7, float64(rng.IntN(300))/3
			got := w.RecordSecond(sec, v0, v1)
			want0, want1 := refs[0].record(sec, v0), refs[1].record(sec, v1)
			if got != want0 || got != want1 {
				t.Fatalf("step %d: RecordSecond(%d, %v, %v) = %v, reference %v %v", step, sec, v0, v1, got, want0, want1)
			}
		case p < 97:
			now := time.Unix(sec+rng.Int64N(70)-5, 0)
			for k, r := range refs {
				if got, want := w.Average(now, Series(k)), r.average(now.Unix()); !same(got, want) {
					t.Fatalf("step %d: %v window (%v) Average(%d, %d) = %v, reference %v", step, w.Len(), w.Algorithm(), now.Unix(), k, got, want)
				}
			}
			if got, want := w.IsEmpty(now), refs[0].isEmpty(now.Unix()); got != want {
				t.Fatalf("step %d: IsEmpty(%d) = %v, reference %v", step, now.Unix(), got, want)
			}
		default:
			length := refLengths[rng.IntN(len(refLengths))]
			algo := Algorithm(rng.IntN(2))
			now := time.Unix(sec+rng.Int64N(70), 0)
			if err := w.Resize(length, algo, now); err != nil {
				t.Fatal(err)
			}
			for _, r := range refs {
				r.resize(length, algo, now.Unix())
			}
		}
	}
}

// TestMatchesReference checks Window against the plain reference over many
// random histories.
func TestMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 7))
	for range 2000 {
		checkAgainstRef(t, rng, 300)
	}
}

func FuzzMatchesReference(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(1700000000), uint64(60))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkAgainstRef(t, rand.New(rand.NewPCG(a, b)), 200)
	})
}
