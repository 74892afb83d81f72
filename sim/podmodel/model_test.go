package podmodel

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Unix(1_790_000_000, 0)

func newTestModel(t *testing.T, cfg ModelConfig, p Profile) *Model {
	t.Helper()
	m, err := NewModel(cfg, p, t0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestModelSteadyLoadUnderCapacity(t *testing.T) {
	// 5 req/s of 100 ms each on one pod: 0.5 requests in the pod on
	// average, and arrivals 200 ms apart never wait.
	m := newTestModel(t, ModelConfig{ContainerConcurrency: 1, ServiceTime: 100 * time.Millisecond}, Constant(5))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(10 * time.Second))
	s, ok := m.Stat("p0")
	if !ok {
		t.Fatal("Stat(p0) missing")
	}
	if !near(s.AverageConcurrentRequests, 0.5, 0.01) {
		t.Errorf("AverageConcurrentRequests = %v, want 0.5", s.AverageConcurrentRequests)
	}
	if !near(s.RequestCount, 5, 0.01) {
		t.Errorf("RequestCount = %v, want 5", s.RequestCount)
	}
	if got, want := s.ProcessUptime, 10.0; got != want {
		t.Errorf("ProcessUptime = %v, want %v", got, want)
	}
	if got, want := s.Timestamp, t0.Add(10*time.Second).Unix(); got != want {
		t.Errorf("Timestamp = %v, want %v", got, want)
	}
	r := m.Report()
	if r.Arrived != 50 || r.Served < 49 {
		t.Errorf("Arrived, Served = %d, %d, want 50, >= 49", r.Arrived, r.Served)
	}
	if r.Wait.Max != 0 {
		t.Errorf("Wait.Max = %s, want 0", r.Wait.Max)
	}
}

func TestModelQueuesOverCapacity(t *testing.T) {
	// 2 req/s of 1 s each on one pod with concurrency 1: half the load
	// queues, so the queue and the waits grow by about a second each second.
	m := newTestModel(t, ModelConfig{ContainerConcurrency: 1, ServiceTime: time.Second}, Constant(2))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(10 * time.Second))
	r := m.Report()
	if r.Arrived != 20 {
		t.Errorf("Arrived = %d, want 20", r.Arrived)
	}
	if r.Served < 8 || r.Served > 10 {
		t.Errorf("Served = %d, want 8..10", r.Served)
	}
	if r.InService != 1 || r.Queued < 9 {
		t.Errorf("InService, Queued = %d, %d, want 1, >= 9", r.InService, r.Queued)
	}
	if r.Wait.Max < 4*time.Second || r.Wait.P50 < time.Second {
		t.Errorf("Wait = %+v, want max >= 4s and p50 >= 1s", r.Wait)
	}
	// The queue-proxy counts queued requests as concurrency.
	if s, _ := m.Stat("p0"); s.AverageConcurrentRequests < 9 {
		t.Errorf("AverageConcurrentRequests = %v, want >= 9 (in service + queued)", s.AverageConcurrentRequests)
	}
}

func TestModelSpreadsOverPods(t *testing.T) {
	m := newTestModel(t, ModelConfig{ServiceTime: 100 * time.Millisecond}, Constant(40))
	for _, p := range []string{"a", "b", "c", "d"} {
		m.AddPod(p, t0)
	}
	m.Advance(t0.Add(5 * time.Second))
	for _, p := range m.Pods() {
		s, _ := m.Stat(p)
		if !near(s.RequestCount, 10, 1) || !near(s.AverageConcurrentRequests, 1, 0.15) {
			t.Errorf("pod %s: RequestCount %v, AverageConcurrentRequests %v, want 10, 1", p, s.RequestCount, s.AverageConcurrentRequests)
		}
	}
}

func TestModelColdStartAndScaleFromZero(t *testing.T) {
	m := newTestModel(t, ModelConfig{ContainerConcurrency: 10, ServiceTime: 50 * time.Millisecond, ColdStart: 2 * time.Second}, Constant(10))
	m.Advance(t0.Add(time.Second)) // no pods: everything waits
	if r := m.Report(); r.Queued != 10 || r.Served != 0 {
		t.Fatalf("at 1s with no pods: Queued, Served = %d, %d, want 10, 0", r.Queued, r.Served)
	}
	m.AddPod("p0", t0.Add(time.Second))
	m.Advance(t0.Add(2 * time.Second))
	if r := m.Report(); r.WarmPods != 0 || r.Served != 0 || r.Queued != 20 {
		t.Fatalf("during cold start: %+v, want 0 warm, 0 served, 20 queued", r)
	}
	m.Advance(t0.Add(10 * time.Second))
	r := m.Report()
	if r.WarmPods != 1 || r.Queued != 0 || r.Served < 99 {
		t.Errorf("after warm-up: %+v, want 1 warm, 0 queued, >= 99 served", r)
	}
	// The first request arrived at 100 ms and waited for the pod (added at
	// 1 s) to finish its 2 s cold start.
	if got, want := r.Wait.Max, 2900*time.Millisecond; got != want {
		t.Errorf("Wait.Max = %s, want %s", got, want)
	}
	if r.Wait.P50 != 0 {
		t.Errorf("Wait.P50 = %s, want 0 once warm traffic dominates", r.Wait.P50)
	}
}

func TestModelRemovePodRequeues(t *testing.T) {
	m := newTestModel(t, ModelConfig{ContainerConcurrency: 1, ServiceTime: 10 * time.Second}, Constant(1))
	m.AddPod("a", t0)
	m.Advance(t0.Add(3 * time.Second)) // 1 in service, 2 queued in a
	m.RemovePod("a", t0.Add(3*time.Second))
	r := m.Report()
	if r.Pods != 0 || r.Queued != 2 || r.Served != 1 {
		t.Fatalf("after removing the only pod: %+v, want 0 pods, 2 queued, 1 served (drained)", r)
	}
	m.AddPod("b", t0.Add(3*time.Second))
	if r := m.Report(); r.InService != 1 || r.Queued != 1 {
		t.Errorf("after adding b: %+v, want 1 in service, 1 queued", r)
	}
}

func TestModelStatBeforeFirstReport(t *testing.T) {
	m := newTestModel(t, ModelConfig{ServiceTime: time.Second}, Constant(100))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(500 * time.Millisecond))
	s, _ := m.Stat("p0")
	if s.PodName != "p0" || s.AverageConcurrentRequests != 0 || s.RequestCount != 0 {
		t.Errorf("Stat before the first period = %+v, want all zero but the pod name", s)
	}
	if _, ok := m.Stat("nope"); ok {
		t.Error("Stat(unknown pod) ok = true")
	}
}

func TestModelConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ModelConfig
		wantErr string
	}{
		{"negative concurrency", ModelConfig{ContainerConcurrency: -1, ServiceTime: 1}, "ContainerConcurrency = -1"},
		{"zero service time", ModelConfig{}, "ServiceTime = 0s"},
		{"negative cold start", ModelConfig{ServiceTime: 1, ColdStart: -1}, "ColdStart = -1ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewModel(tt.cfg, Constant(1), t0)
			if err == nil || !contains(err.Error(), tt.wantErr) {
				t.Errorf("NewModel error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func BenchmarkModelAdvance(b *testing.B) {
	for _, pods := range []int{1, 10, 100} {
		b.Run(itoa(pods)+"pods", func(b *testing.B) {
			m, err := NewModel(ModelConfig{ContainerConcurrency: 10, ServiceTime: 100 * time.Millisecond}, Constant(float64(pods)*50), t0)
			if err != nil {
				b.Fatal(err)
			}
			for i := range pods {
				m.AddPod("p"+itoa(i), t0)
			}
			now := t0
			for b.Loop() {
				now = now.Add(10 * time.Millisecond)
				m.Advance(now)
			}
		})
	}
}

func TestModelPoissonArrivals(t *testing.T) {
	// At 50% utilisation evenly spaced arrivals never wait; Poisson ones
	// sometimes do, and their count stays near rate × time.
	cfg := ModelConfig{ContainerConcurrency: 1, ServiceTime: 100 * time.Millisecond, Poisson: true, Seed: 1}
	m := newTestModel(t, cfg, Constant(5))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(200 * time.Second))
	r := m.Report()
	if r.Arrived < 900 || r.Arrived > 1100 {
		t.Errorf("Arrived = %d over 200 s at 5/s, want about 1000", r.Arrived)
	}
	if r.Wait.P99 == 0 {
		t.Errorf("Wait.P99 = 0, want some queueing from bunched arrivals")
	}
	// The same seed replays the same run.
	again := newTestModel(t, cfg, Constant(5))
	again.AddPod("p0", t0)
	again.Advance(t0.Add(200 * time.Second))
	if got := again.Report(); got != r {
		t.Errorf("same seed: %+v, want %+v", got, r)
	}
}

func TestPoissonMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, lambda := range []float64{0.05, 2, 29, 100} {
		sum := 0
		const n = 20000
		for range n {
			sum += poisson(rng, lambda)
		}
		if mean := float64(sum) / n; !near(mean, lambda, 0.05*lambda+0.01) {
			t.Errorf("mean of poisson(%v) = %v", lambda, mean)
		}
	}
}

func TestModelLatencyAndExponentialService(t *testing.T) {
	// Constant service: latency is wait + 100 ms exactly.
	m := newTestModel(t, ModelConfig{ServiceTime: 100 * time.Millisecond}, Constant(10))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(10 * time.Second))
	if r := m.Report(); r.Latency.P50 != 100*time.Millisecond || r.Latency.Max != 100*time.Millisecond {
		t.Errorf("constant service latency = %+v, want 100ms throughout", r.Latency)
	}

	// Exponential service with mean 100 ms: the mean holds and the tail is
	// long (p99 of an exponential is about 4.6 times the mean).
	cfg := ModelConfig{ServiceTime: 100 * time.Millisecond, ExponentialService: true, Seed: 7}
	m = newTestModel(t, cfg, Constant(20))
	m.AddPod("p0", t0)
	m.Advance(t0.Add(300 * time.Second))
	r := m.Report()
	if mean := r.Latency.Mean; mean < 90*time.Millisecond || mean > 110*time.Millisecond {
		t.Errorf("exponential service mean latency = %s, want about 100ms", mean)
	}
	if p99 := r.Latency.P99; p99 < 350*time.Millisecond || p99 > 600*time.Millisecond {
		t.Errorf("exponential service p99 latency = %s, want about 460ms", p99)
	}
	// Requests finish out of order, and each pod's concurrency still
	// averages rate × mean service time.
	if s, _ := m.Stat("p0"); s.AverageConcurrentRequests <= 0 || s.AverageConcurrentRequests > 10 {
		t.Errorf("AverageConcurrentRequests = %v", s.AverageConcurrentRequests)
	}
}

// times is an Arrivals profile of given arrival times.
type times struct{ at []time.Duration }

func (a *times) Rate(time.Duration) float64 { return 0 }

func (a *times) Pop() (time.Duration, bool) {
	if len(a.at) == 0 {
		return 0, false
	}
	at := a.at[0]
	a.at = a.at[1:]
	return at, true
}

func TestModelColdArrivalsAndIdlePodSeconds(t *testing.T) {
	// One request at 1 s finds no pod; a pod added at 2 s is warm at 4 s
	// and serves it until 5 s; one at 7 s finds it warm, served until 8 s.
	// The pod holds nothing from 2 to 4, 5 to 7 and 8 to 10 s.
	m := newTestModel(t, ModelConfig{ServiceTime: time.Second, ColdStart: 2 * time.Second},
		&times{at: []time.Duration{time.Second, 7 * time.Second}})
	m.Advance(t0.Add(2 * time.Second))
	m.AddPod("p", t0.Add(2*time.Second))
	m.Advance(t0.Add(10 * time.Second))
	r := m.Report()
	if r.Arrived != 2 || r.ColdArrivals != 1 {
		t.Errorf("Arrived, ColdArrivals = %d, %d, want 2, 1", r.Arrived, r.ColdArrivals)
	}
	if !near(r.IdlePodSeconds, 6, 1e-9) {
		t.Errorf("IdlePodSeconds = %v, want 6", r.IdlePodSeconds)
	}
	// Removing the idle pod at 10 s keeps its 6 s; nothing more accrues.
	m.RemovePod("p", t0.Add(10*time.Second))
	m.Advance(t0.Add(20 * time.Second))
	if r := m.Report(); !near(r.IdlePodSeconds, 6, 1e-9) {
		t.Errorf("IdlePodSeconds after removal = %v, want 6", r.IdlePodSeconds)
	}
}
