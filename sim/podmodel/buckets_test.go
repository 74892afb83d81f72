package podmodel

import (
	"testing"
	"time"
)

func TestBucketsKeepCountsAndOrder(t *testing.T) {
	counts := []int64{3, 0, 0, 7, 1, 0, 250}
	pop := func(seed uint64) []time.Duration {
		b := &Buckets{Width: time.Minute, Counts: counts, Seed: seed}
		var out []time.Duration
		for {
			at, ok := b.Pop()
			if !ok {
				return out
			}
			out = append(out, at)
		}
	}
	a := pop(7)
	per := make([]int64, len(counts))
	for i, at := range a {
		if i > 0 && at < a[i-1] {
			t.Fatalf("arrival %d at %s before arrival %d at %s", i, at, i-1, a[i-1])
		}
		per[at/time.Minute]++
	}
	for i := range counts {
		if per[i] != counts[i] {
			t.Errorf("bucket %d: %d arrivals, want %d", i, per[i], counts[i])
		}
	}
	b := pop(7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed: arrival %d at %s then %s", i, a[i], b[i])
		}
	}
	c := pop(8)
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 7 and 8 placed every arrival alike")
	}
}

func TestCountsFromRates(t *testing.T) {
	got := CountsFromRates([]float64{0.5, 0.5, 0.5, 2.25, -1, 0.75}, time.Second)
	want := []int64{0, 1, 0, 2, 0, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("CountsFromRates = %v, want %v", got, want)
		}
	}
}

func TestModelWithArrivalsMatchesEvents(t *testing.T) {
	// One request a second (at 0.5 s, 1.5 s, …) of 100 ms each on one warm
	// pod: nothing waits, every request is served, and the event-driven model
	// reports the same concurrency the stepped one does.
	counts := make([]int64, 60)
	for i := range counts {
		counts[i] = 1
	}
	cfg := ModelConfig{ServiceTime: 100 * time.Millisecond, BoundedStats: true}
	m, err := NewModel(cfg, &Buckets{Width: time.Second, Counts: counts, Seed: 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	m.AddPod("a", t0)
	m.Advance(t0.Add(61 * time.Second))
	r := m.Report()
	if r.Arrived != 60 || r.Served != 60 || r.Wait.Max != 0 {
		t.Fatalf("report = %+v, want 60 arrived and served without waiting", r)
	}
	if got, want := r.Latency.Max, 100*time.Millisecond; got != want {
		t.Errorf("latency max = %s, want %s", got, want)
	}
	st, _ := m.Stat("a")
	if !near(st.AverageConcurrentRequests, 0.1, 1e-9) && st.AverageConcurrentRequests != 0 {
		t.Errorf("last stat concurrency = %v, want 0.1 (or 0 when the period's arrival fell outside it)", st.AverageConcurrentRequests)
	}
}

func TestModelWithArrivalsColdStart(t *testing.T) {
	// Ten arrivals in the first second with no pod; a pod added at 2 s
	// serves after a 1 s cold start: each waited until 3 s.
	b := &Buckets{Width: time.Second, Counts: []int64{10}, Seed: 3}
	m, err := NewModel(ModelConfig{ServiceTime: time.Millisecond, BoundedStats: true}, b, t0)
	if err != nil {
		t.Fatal(err)
	}
	m.Advance(t0.Add(2 * time.Second))
	if r := m.Report(); r.Queued != 10 {
		t.Fatalf("queued = %d before any pod, want 10", r.Queued)
	}
	cfg := ModelConfig{ServiceTime: time.Millisecond, ColdStart: time.Second, BoundedStats: true}
	m2, _ := NewModel(cfg, &Buckets{Width: time.Second, Counts: []int64{10}, Seed: 3}, t0)
	m2.AddPod("a", t0.Add(2*time.Second))
	m2.Advance(t0.Add(4 * time.Second))
	r := m2.Report()
	if r.Served != 10 || r.Wait.Max > 3*time.Second || r.Wait.Max < 2*time.Second {
		t.Fatalf("report = %+v, want 10 served, waits between 2 s and 3 s", r)
	}
}
