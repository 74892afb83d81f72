package scrape

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSampleSize(t *testing.T) {
	// Knative's populationMeanSampleSize (knative.dev/serving v0.50.0 pkg/autoscaler/metrics/sample_size.go).
	for n, want := range map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 4, 10: 7, 16: 9, 30: 11, 100: 14, 150: 15, 1000: 16} {
		if got := SampleSize(n); got != want {
			t.Errorf("SampleSize(%d) = %d, want %d", n, got, want)
		}
	}
}

// Knative's own sample sizes and extrapolations (scrape_sample_size.json)
// are replayed against SampleSize and Extrapolate by test/conformance.

func pods(now time.Time, ages ...time.Duration) []Pod {
	out := make([]Pod, len(ages))
	for i, a := range ages {
		out[i] = Pod{Name: string(rune('a' + i)), Start: now.Add(-a)}
	}
	return out
}

func names(ps []Pod) string {
	s := ""
	for _, p := range ps {
		s += p.Name
	}
	return s
}

func TestOrder(t *testing.T) {
	now := time.Unix(10000, 0)
	window := time.Minute
	old, young := 2*time.Minute, time.Second
	rnd := rand.New(rand.NewPCG(1, 2))

	t.Run("fewer old than sample: old first, young shuffled behind", func(t *testing.T) {
		// 5 pods: sample 4; old are b and d.
		in := pods(now, young, old, young, old, young)
		got, n := Order(nil, in, now, window, rnd)
		if n != 4 {
			t.Fatalf("n = %d, want 4", n)
		}
		if names(got[:2]) != "bd" {
			t.Errorf("order %s: want the old pods b, d first in their order", names(got))
		}
		if len(got) != 5 {
			t.Errorf("order %s: want all 5 pods", names(got))
		}
	})
	t.Run("enough old: old shuffled, young as spares in order", func(t *testing.T) {
		// 6 pods: sample 5; old a,b,c,d,e; young f.
		in := pods(now, old, old, old, old, old, young)
		seen := map[string]bool{}
		for range 50 {
			got, n := Order(nil, in, now, window, rnd)
			if n != 5 {
				t.Fatalf("n = %d, want 5", n)
			}
			if got[5].Name != "f" {
				t.Fatalf("order %s: want the young pod last", names(got))
			}
			seen[names(got[:5])] = true
		}
		if len(seen) < 2 {
			t.Errorf("old pods never shuffled: %v", seen)
		}
	})
	t.Run("exactly stable window old counts as old", func(t *testing.T) {
		in := pods(now, young, window)
		got, _ := Order(nil, in, now, window, rnd)
		if got[0].Name != "b" {
			t.Errorf("order %s: want b (started exactly a window ago) first", names(got))
		}
	})
	t.Run("appends to dst without touching the input", func(t *testing.T) {
		in := pods(now, old, young, old)
		dst := make([]Pod, 0, 8)
		got, _ := Order(dst, in, now, window, rnd)
		if names(in) != "abc" || len(got) != 3 {
			t.Errorf("input %s changed or result %s short", names(in), names(got))
		}
	})
}
