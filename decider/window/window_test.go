package window

import (
	"math"
	"testing"
	"time"
)

// epoch is an even Unix second, as in the Knative vectors.
var epoch = time.Unix(1700000000, 0)

func at(sec float64) time.Time { return epoch.Add(time.Duration(sec * float64(time.Second))) }

type sample struct {
	t float64
	v float64
}

func TestLinearAverage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		length  time.Duration
		samples []sample
		now     float64
		want    float64
	}{
		{"partial window: one sample averages to itself", 60 * time.Second, []sample{{0.5, 21}}, 1, 21},
		{"same second sums", 60 * time.Second, []sample{{0.2, 1}, {0.5, 20}}, 1, 21},
		{"current second counts when written", 60 * time.Second, []sample{{0.5, 10}, {1.5, 20}}, 1, 15},
		{"trailing gap shrinks the divisor", 60 * time.Second, []sample{{0.5, 10}, {1.5, 20}}, 10, 15},
		{"interior gap counts as zero", 60 * time.Second, []sample{{0.5, 10}, {3.5, 20}}, 3, 7.5},
		{"a window of silence reads zero", 6 * time.Second, []sample{{0.5, 10}}, 6, 0},
		{"just inside the window holds", 6 * time.Second, []sample{{0.5, 10}}, 5, 10},
		{"full window divides by the bucket count", 3 * time.Second, []sample{{0, 3}, {1, 3}, {2, 3}, {3, 6}}, 3, 4},
		{"six-decimal rounding", 60 * time.Second, []sample{{0, 1}, {1, 1}, {2, 0}}, 2, 0.666667},
		{"nothing written reads zero", 60 * time.Second, nil, 5, 0},
		{"old value beyond a window is dropped", 6 * time.Second, []sample{{10, 6}, {3, 100}}, 10, 6},
		{"late value inside the window joins its bucket", 6 * time.Second, []sample{{10, 6}, {8, 6}}, 10, 4},
		{"late value in the oldest bucket leaves the next second's average",
			6 * time.Second, []sample{{10, 1}, {11, 1}, {12, 1}, {13, 1}, {14, 1}, {15, 1}, {10.5, 5}}, 16, 1},
		{"two stale seconds", 6 * time.Second, []sample{{10, 1}, {11, 2}, {12, 3}, {13, 4}, {14, 5}, {15, 6}}, 17, 4.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(tt.length, Linear)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.samples {
				w.Record(at(s.t), s.v, -s.v)
			}
			// The second series, the first negated, averages to the negation.
			if got := w.Average(at(tt.now), First); got != tt.want {
				t.Errorf("Average = %v, want %v", got, tt.want)
			}
			if got := w.Average(at(tt.now), Second); got != -tt.want {
				t.Errorf("Average of the second series = %v, want %v", got, -tt.want)
			}
		})
	}
}

func TestRecordReportsDrops(t *testing.T) {
	t.Parallel()
	w, _ := New(6*time.Second, Linear)
	if !w.Record(at(10), 1, 0) {
		t.Fatal("first Record = false, want true")
	}
	if w.Record(at(4), 1, 0) {
		t.Error("Record of a value a window old = true, want false")
	}
	if !w.Record(at(5), 1, 0) {
		t.Error("Record inside the window = false, want true")
	}
}

func TestIsEmpty(t *testing.T) {
	t.Parallel()
	w, _ := New(6*time.Second, Linear)
	if !w.IsEmpty(at(0)) {
		t.Error("IsEmpty of a new window = false, want true")
	}
	w.Record(at(0.5), 1, 0)
	for _, c := range []struct {
		now  float64
		want bool
	}{{0, false}, {6, false}, {6.9, false}, {7, true}} {
		if got := w.IsEmpty(at(c.now)); got != c.want {
			t.Errorf("IsEmpty(%v) = %v, want %v (strict: empty only after more than a window)", c.now, got, c.want)
		}
	}
}

func TestSmoothing(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 4000; n++ {
		if got, want := smoothingFor(n), computeSmoothing(n); got != want {
			t.Fatalf("smoothingFor(%d) = %v, want %v", n, got, want)
		}
	}
	if got := smoothingFor(60); got != 0.2 {
		t.Errorf("smoothing(60) = %v, want 0.2", got)
	}
	if got := smoothingFor(6); math.Abs(got-0.7845565) > 1e-6 {
		t.Errorf("smoothing(6) = %v, want ≈0.785", got)
	}
}

func TestWeightedAverage(t *testing.T) {
	t.Parallel()
	w, _ := New(60*time.Second, WeightedExponential)
	w.Record(at(0.5), 10, 0)
	// One bucket weighted by s: no partial-window correction.
	if got, want := w.Average(at(0), First), 2.0; got != want {
		t.Errorf("Average at the write = %v, want %v", got, want)
	}
	// One second later the weight decays by (1 − s).
	if got, want := w.Average(at(1), First), 10*0.2*0.8; math.Abs(got-want) > 1e-12 {
		t.Errorf("Average a second later = %v, want %v", got, want)
	}
	if got := w.Average(at(61), First); got != 0 {
		t.Errorf("Average after the window = %v, want 0", got)
	}
	w.Record(at(1.5), 10, 0)
	if got, want := w.Average(at(1), First), 10*0.2+10*0.2*0.8; math.Abs(got-want) > 1e-12 {
		t.Errorf("Average of two buckets = %v, want %v", got, want)
	}
}

func TestResizeKeepsRecentData(t *testing.T) {
	t.Parallel()
	w, _ := New(10*time.Second, Linear)
	for s := 0; s < 10; s++ {
		w.Record(at(float64(s)), float64(s), 0)
	}
	if err := w.Resize(4*time.Second, Linear, at(9)); err != nil {
		t.Fatal(err)
	}
	if got, want := w.Average(at(9), First), (6+7+8+9)/4.0; got != want {
		t.Errorf("Average after shrinking = %v, want %v", got, want)
	}
	if err := w.Resize(20*time.Second, Linear, at(9)); err != nil {
		t.Fatal(err)
	}
	if got, want := w.Average(at(9), First), (6+7+8+9)/4.0; got != want {
		t.Errorf("Average after growing = %v, want %v", got, want)
	}
	if err := w.Resize(20*time.Second, Linear, at(100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Resize(5*time.Second, Linear, at(100)); err != nil {
		t.Fatal(err)
	}
	if !w.IsEmpty(at(100)) {
		t.Error("a window resized long after its last write is not empty")
	}
}

func TestNewRefusesBadLengths(t *testing.T) {
	t.Parallel()
	for _, l := range []time.Duration{0, -time.Second, MaxLength + time.Second} {
		if _, err := New(l, Linear); err == nil {
			t.Errorf("New(%v) succeeded, want an error", l)
		}
	}
	if _, err := New(time.Second, Algorithm(9)); err == nil {
		t.Error("New with an unknown algorithm succeeded, want an error")
	}
}

func TestNoAllocations(t *testing.T) {
	w, _ := New(60*time.Second, Linear)
	s := 0
	if n := testing.AllocsPerRun(1000, func() {
		s++
		w.Record(at(float64(s)), 1, 2)
		_ = w.Average(at(float64(s)), First)
	}); n != 0 {
		t.Errorf("Record+Average allocate %v times, want 0", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	for _, l := range []time.Duration{6 * time.Second, 60 * time.Second, time.Hour} {
		b.Run(l.String(), func(b *testing.B) {
			w, _ := New(l, Linear)
			b.ReportAllocs()
			s := 0
			for b.Loop() {
				s++
				w.RecordSecond(epoch.Unix()+int64(s), 1, 2)
			}
		})
	}
}

func BenchmarkAverage(b *testing.B) {
	for _, algo := range []Algorithm{Linear, WeightedExponential} {
		for _, l := range []time.Duration{6 * time.Second, 60 * time.Second, time.Hour} {
			b.Run(algo.String()+"/"+l.String(), func(b *testing.B) {
				w, _ := New(l, algo)
				for s := range Buckets(l) {
					w.Record(at(float64(s)), float64(s%7), 1)
				}
				now := at(float64(Buckets(l)) + 0.5)
				b.ReportAllocs()
				for b.Loop() {
					_ = w.Average(now, First)
				}
			})
		}
	}
}
