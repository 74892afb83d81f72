package validate

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/decider/keepalive"
	"github.com/tidalscale/tidal/sim"
	"github.com/tidalscale/tidal/sim/podmodel"
	"github.com/tidalscale/tidal/sim/trace"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
)

// The timer's load: one request every timerPeriod from timerFirst, for
// timerLength. 90 s is the shortest period the policy pre-warms for: its
// idle times (the period less the request's busy second) fall in the
// histogram's second minute bin, so the pod comes back 54 s after each
// request and stays until 132 s after it.
const (
	timerPeriod = 90 * time.Second
	timerFirst  = 20 * time.Second
	timerLength = 215 * time.Second
	// timerLearned is how long before the test's start the last request of
	// the history the target starts with came.
	timerLearned = 70 * time.Second
)

// timerArrivals are the seconds (since the load began) of the requests.
func timerArrivals() []time.Duration {
	var out []time.Duration
	for at := timerFirst; at < timerLength; at += timerPeriod {
		out = append(out, at)
	}
	return out
}

// timerCounts are the requests of each second of the load.
func timerCounts() []int64 {
	counts := make([]int64, int(timerLength/time.Second))
	for _, at := range timerArrivals() {
		counts[at/time.Second] = 1
	}
	return counts
}

// timerHistory is the keep-alive memory the PodAutoscaler starts with:
// twenty idle times of the period, the last request timerLearned before
// start, as its status would keep it after the timer had run for half an
// hour (the policy needs ten idle times before it predicts; learning them
// live would take a quarter of an hour).
func timerHistory(start time.Time) string {
	var s keepalive.State
	last := start.Add(-timerLearned).Truncate(time.Second)
	for i := 20; i >= 0; i-- {
		s.Observe(last.Add(-time.Duration(i) * (timerPeriod - 2*time.Second)))
	}
	return s.Encode()
}

var timerAnnotations = map[string]string{kpaconfig.AnnotationKeepAlive: kpaconfig.KeepAlivePredictiveValue}

// TestPredictiveKeepAliveTimer runs a timer-like target with the
// predictive keep-alive policy through the live collector, decider and
// actuator on the test cluster, one request every 90 s, and replays the
// same load and history through package sim. Live and replayed, every
// request must find a pre-warmed pod, the target must be at zero between
// requests, and the two must agree: the times the target reaches zero
// after a request and comes back before the next (±6 s and ±4 s, as
// TestMakeRunProfile's: the live decider's grid is aligned to Unix time,
// the load to the test's start), the cold starts (each pre-warm is one)
// and the pod-seconds (within 20 %).
//
// The target starts from a learned history (the memory a PodAutoscaler's
// status keeps), which also proves that a decider that did not learn it
// itself acts on it: the decider and collector here have never seen the
// target before.
func TestPredictiveKeepAliveTimer(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	var buildLog bytes.Buffer
	bin, err := system.BuildTemp(ctx, &buildLog)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, buildLog.String())
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	keep := os.Getenv("TIDAL_E2E_KEEP_LOGS") != ""
	s, err := system.Start(startCtx, system.Options{BinDir: bin, Cluster: c, KeepLogs: keep})
	if err != nil {
		t.Fatalf("start system: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range s.Procs() {
				t.Logf("--- %s log tail ---\n%s", p.Name, p.LogTail(40))
			}
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop system: %v", err)
		}
	})

	// Each request is an arrival event of its own, as in the replay: a
	// rate of one a second for one second would be summed in 10 ms model
	// steps and could fall short of a whole request, moving it to the next.
	start := time.Now()
	timer, err := s.StartKPA(ctx, system.KPAOptions{
		Namespace: ns, Name: "timer", Replicas: 1, Annotations: timerAnnotations,
		Profile: &podmodel.Buckets{Width: time.Second, Counts: timerCounts(), Seed: 1},
		Model:   podmodel.ModelConfig{ServiceTime: 200 * time.Millisecond, ColdStart: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer timer.Stop()
	seedHistory(t, s, ns, "timer", timerHistory(start))

	runCtx, stop := context.WithDeadline(ctx, start.Add(timerLength))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.RunActivator(runCtx, timer, time.Second) }()
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	var live []point
	var ledger system.Ledger
	obs.Follow(runCtx, []system.Target{timer}, 2*time.Second, 1200*time.Millisecond, func(_ int, smp system.Sample) {
		live = append(live, point{at: smp.Time.Sub(start).Seconds(), ready: max(smp.Ready, 0), desired: smp.Desired, state: smp.State()})
		ledger.Add(smp)
	}, func(err error) { t.Logf("sample: %v", err) })
	stop()
	if err := <-done; err != nil {
		t.Errorf("activator: %v", err)
	}
	exp := timer.Experience(&ledger)

	res := replayTimer(t)
	replayed := at(live, res)
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %34s %9s\n", "seconds", "live (desired, state)", "sim")
	for i := range live {
		fmt.Fprintf(&b, "%8.1f %34s %9d\n", live[i].at, fmt.Sprintf("%d (%d %s)", live[i].ready, live[i].desired, live[i].state), replayed[i].ready)
	}
	t.Logf("ready pods, live and replayed:\n%s", b.String())
	t.Logf("live: %s; requests that found no warm pod %d", exp, exp.Report.ColdArrivals)
	t.Logf("sim: cold starts %d, requests that found no warm pod %d, pod-seconds %.0f, idle pod-seconds %.0f",
		res.ColdStarts, res.ColdStartRequests, res.PodSeconds, res.IdlePodSeconds)

	arrivals := timerArrivals()
	if got := exp.Report.Arrived; got != int64(len(arrivals)) {
		t.Fatalf("live: %d requests arrived, want %d", got, len(arrivals))
	}
	if exp.Report.ColdArrivals != 0 || res.ColdStartRequests != 0 {
		t.Errorf("requests that found no warm pod: live %d, replay %d; want none, every request pre-warmed", exp.Report.ColdArrivals, res.ColdStartRequests)
	}
	var times []timeCheck
	for k, a := range arrivals {
		times = append(times, timeCheck{fmt.Sprintf("zero after request %d at %v", k+1, a), a.Seconds(), func(n int32) bool { return n == 0 }, 6})
		if k > 0 {
			prev := arrivals[k-1].Seconds() + 8
			times = append(times, timeCheck{fmt.Sprintf("pre-warmed for request %d at %v", k+1, a), prev, func(n int32) bool { return n > 0 }, 4})
		}
	}
	full := make([]point, 0, len(res.Timeline))
	for _, p := range res.Timeline {
		full = append(full, point{at: p.At.Seconds(), ready: p.Ready})
	}
	for _, c := range compareBracketed(live, full, times) {
		t.Error(c)
	}
	// Between a request and the pre-warm for the next, the target sits at
	// zero: 50 s of each 90.
	if z := zeroShare(live, 30, timerLength.Seconds()); z < 0.3 {
		t.Errorf("live: at zero %.0f %% of the time after the first request, want the policy to unload between requests", 100*z)
	}
	if l, r := coldStarts(live, 10), coldStarts(replayed, 10); l != r || l < len(arrivals)-1 {
		t.Errorf("cold starts (pre-warms) after 10 s: live %d, replay %d; want equal, one per request after the first", l, r)
	}
	if l, r := podSeconds(live), podSeconds(replayed); math.Abs(l-r) > 0.2*r {
		t.Errorf("pod-seconds (2 s samples): live %.0f, replay %.0f; want within 20 %%", l, r)
	}
}

// seedHistory records history as the keep-alive memory of the
// PodAutoscaler's last decision, as the actuator records a decider's, so
// the collector hands it to the decider.
func seedHistory(t *testing.T, s *system.System, ns, name, history string) {
	t.Helper()
	crds, err := s.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	pas := crds.AutoscalingV1alpha1().PodAutoscalers(ns)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pa, err := pas.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := time.Now()
		pa.Status.LastDecision = &autoscalingv1alpha1.PodAutoscalerDecision{
			Sequence: now.Add(-time.Second).UnixMilli(), DesiredScale: 1, Reason: "the timer's history", Time: metav1.NewTime(now),
			KeepAliveState: history,
		}
		_, err = pas.UpdateStatus(context.Background(), pa, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("seed the keep-alive history: %v", err)
	}
}

// replayTimer replays the timer's load and history through package sim.
func replayTimer(t *testing.T) *sim.Result {
	t.Helper()
	cfg := sim.Configuration{Name: "timer", Annotations: timerAnnotations,
		Pods: sim.Pods{ReadyDelay: sim.Duration(time.Second), ColdStart: sim.Duration(500 * time.Millisecond), ServiceTime: sim.Duration(200 * time.Millisecond)}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	tr := trace.Trace{Name: "timer", Width: time.Second, Counts: timerCounts()}
	res, err := sim.Run(&tr, &cfg, sim.Options{Seed: 1, Timeline: true, KeepAliveState: timerHistory(sim.Epoch)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// compareBracketed is compare's time checks, each against the live
// interval in which the state was reached: from the last sample before it
// to the first in it. On a loaded machine the observer's 2 s samples come
// late, seconds apart at times, and the first sample in a state can be
// well after the state began. replay is the replay's whole timeline, a
// point a second.
func compareBracketed(live, replay []point, times []timeCheck) []string {
	var errs []string
	for _, c := range times {
		lo, hi := math.Inf(1), math.Inf(1)
		for i, p := range live {
			if p.at >= c.from && c.cond(p.ready) {
				lo, hi = p.at, p.at
				if i > 0 && live[i-1].at >= c.from {
					lo = live[i-1].at
				}
				break
			}
		}
		r := math.Inf(1)
		for _, p := range replay {
			if p.at >= c.from && c.cond(p.ready) {
				r = p.at
				break
			}
		}
		switch {
		case math.IsInf(r, 1):
			errs = append(errs, fmt.Sprintf("%s: the replay never got there", c.what))
		case math.IsInf(hi, 1):
			errs = append(errs, fmt.Sprintf("%s: the live run never got there (the replay at %.1f s)", c.what, r))
		case r < lo-c.tolerance || r > hi+c.tolerance:
			errs = append(errs, fmt.Sprintf("%s: live between %.1f and %.1f s, replay at %.1f s; want within %.0f s", c.what, lo, hi, r, c.tolerance))
		}
	}
	return errs
}

// zeroShare is the share of the samples from..to with no ready pod.
func zeroShare(ps []point, from, to float64) float64 {
	n, zero := 0, 0
	for _, p := range ps {
		if p.at < from || p.at >= to {
			continue
		}
		n++
		if p.ready == 0 {
			zero++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(zero) / float64(n)
}
