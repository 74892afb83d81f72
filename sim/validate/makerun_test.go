package validate

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidalscale/tidal/sim"
	"github.com/tidalscale/tidal/sim/podmodel"
	"github.com/tidalscale/tidal/sim/trace"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// webSteps is `make run`'s web load (hack/run's script), the same as
// ../testdata/makerun.csv.
var webSteps = podmodel.Steps{{At: 0, Rate: 10}, {At: 20 * time.Second, Rate: 300}, {At: 60 * time.Second, Rate: 60},
	{At: 80 * time.Second, Rate: 0}, {At: 115 * time.Second, Rate: 50}, {At: 145 * time.Second, Rate: 0}}

const profileLength = 175 * time.Second

// point is one 2 s sample of ready pods, at seconds since the load began.
type point struct {
	at    float64
	ready int32
}

// TestMakeRunProfile runs `make run`'s KPA target (its annotations, 6 s
// scale-to-zero grace, 100 ms service time, 500 ms cold start) through the
// live collector, decider and actuator on the test cluster for the
// profile's 175 s, replays the same profile and configuration
// (../testdata/makerun.{csv,yaml}) through package sim, and compares the
// ready pods, sampled every 2 s as make run samples them.
//
// Tolerances, and why:
//   - times: ±4 s (two decider ticks) for scaling up and leaving zero,
//     ±6 s for reaching zero: the live decider's 2 s grid is aligned to Unix
//     time and the load to the test's start, so the two replays see each
//     step up to one tick apart; kwok's readiness and the actuator's API
//     writes add up to a second more, and going to zero runs through two
//     more grid-aligned steps (a stable window of zeros, then the grace
//     period's requeue);
//   - steady states: ±1 pod, at the end of the step and in steady load: the
//     live panic and stable windows hold samples the scrapes took at other
//     phases of the pods' 1 s reporting periods;
//   - the wake from zero: only its time. The activator's first stat
//     carries the requests queued since the load came back, which in the
//     live system is anything up to a second of arrivals (its 1 s ticker's
//     phase is arbitrary) and in the replay exactly one second's; the scale
//     it asks for follows that count (1 to 8 pods here);
//   - cold starts after the first 10 s: equal; pod-seconds: within 20 %.
func TestMakeRunProfile(t *testing.T) {
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
	s, err := system.Start(startCtx, system.Options{BinDir: bin, Cluster: c, AutoscalerConfig: map[string]string{"scale-to-zero-grace-period": "6s"}})
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

	start := time.Now()
	web, err := s.StartKPA(ctx, system.KPAOptions{
		Namespace: ns, Name: "web", Replicas: 1, Profile: webSteps,
		Annotations: map[string]string{
			"autoscaling.knative.dev/window":                        "6s",
			"autoscaling.knative.dev/panic-window-percentage":       "50",
			"autoscaling.knative.dev/target":                        "10",
			"autoscaling.knative.dev/target-utilization-percentage": "70",
		},
		Model: podmodel.ModelConfig{ServiceTime: 100 * time.Millisecond, ColdStart: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer web.Stop()
	runCtx, stop := context.WithDeadline(ctx, start.Add(profileLength))
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := s.RunActivator(runCtx, web, time.Second); err != nil {
			t.Errorf("activator: %v", err)
		}
	})
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	var live []point
	var ledger system.Ledger
	obs.Follow(runCtx, []system.Target{web}, 2*time.Second, 1200*time.Millisecond, func(_ int, smp system.Sample) {
		live = append(live, point{at: smp.Time.Sub(start).Seconds(), ready: max(smp.Ready, 0)})
		ledger.Add(smp)
	}, func(err error) { t.Logf("sample: %v", err) })
	stop()
	wg.Wait()
	exp := web.Experience(&ledger)

	// The replay.
	cfgData, err := os.ReadFile("../testdata/makerun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := sim.ParseFile(cfgData)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../testdata/makerun.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.ReadRates(f, "makerun.csv")
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(&tr, &cfgs[0], sim.Options{Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	// The replay's ready pods at the live samples' times since the start.
	var replay []point
	for _, p := range live {
		i := min(max(int(p.at), 0), len(res.Timeline)-1)
		replay = append(replay, point{at: p.at, ready: res.Timeline[i].Ready})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %6s %6s\n", "seconds", "live", "sim")
	for i := range live {
		fmt.Fprintf(&b, "%8.1f %6d %6d\n", live[i].at, live[i].ready, replay[i].ready)
	}
	t.Logf("ready pods, live and replayed:\n%s", b.String())
	t.Logf("live: %s", exp)
	t.Logf("sim: cold starts %d, pod-seconds %.0f, scale events %d", res.ColdStarts, res.PodSeconds, res.ScaleEvents)

	for _, c := range compare(live, replay) {
		t.Error(c)
	}
	if l, r := coldStarts(live, 10), coldStarts(replay, 10); l != r {
		t.Errorf("cold starts after 10 s: live %d, replay %d; want equal", l, r)
	}
	if l, r := podSeconds(live), podSeconds(replay); math.Abs(l-r) > 0.2*r {
		t.Errorf("pod-seconds (2 s samples): live %.0f, replay %.0f; want within 20 %%", l, r)
	}
}

// compare checks the phase by phase tolerances of TestMakeRunProfile.
func compare(live, replay []point) []string {
	var errs []string
	first := func(ps []point, from float64, cond func(int32) bool) float64 {
		for _, p := range ps {
			if p.at >= from && cond(p.ready) {
				return p.at
			}
		}
		return math.Inf(1)
	}
	times := []struct {
		what      string
		from      float64
		cond      func(int32) bool
		tolerance float64
	}{
		{"scale-up to 3 pods after the step at 20 s", 20, func(n int32) bool { return n >= 3 }, 4},
		{"zero after the load goes at 80 s", 80, func(n int32) bool { return n == 0 }, 6},
		{"leaving zero after the load returns at 115 s", 115, func(n int32) bool { return n > 0 }, 4},
		{"zero after the load goes at 145 s", 145, func(n int32) bool { return n == 0 }, 6},
	}
	for _, c := range times {
		l, r := first(live, c.from, c.cond), first(replay, c.from, c.cond)
		if math.IsInf(r, 1) {
			errs = append(errs, fmt.Sprintf("%s: the replay never got there", c.what))
			continue
		}
		if math.Abs(l-r) > c.tolerance {
			errs = append(errs, fmt.Sprintf("%s: live at %.1f s, replay at %.1f s; want within %.0f s", c.what, l, r, c.tolerance))
		}
	}
	steady := []struct {
		what     string
		from, to float64
	}{
		{"warm-up", 6, 20}, {"steady load", 32, 60}, {"after the drop", 72, 80}, {"returned load, settled", 134, 145}, {"quiet", 160, 175},
	}
	for _, c := range steady {
		for i := range live {
			if live[i].at < c.from || live[i].at >= c.to {
				continue
			}
			if d := live[i].ready - replay[i].ready; d > 1 || d < -1 {
				errs = append(errs, fmt.Sprintf("%s at %.1f s: live %d ready pods, replay %d; want within 1", c.what, live[i].at, live[i].ready, replay[i].ready))
			}
		}
	}
	return errs
}

// coldStarts counts the times ready pods went from 0 to more, from the
// given second on, as system.Ledger does.
func coldStarts(ps []point, from float64) int {
	n := 0
	for i := 1; i < len(ps); i++ {
		if ps[i].at >= from && ps[i-1].ready == 0 && ps[i].ready > 0 {
			n++
		}
	}
	return n
}

// podSeconds integrates ready pods over the samples.
func podSeconds(ps []point) float64 {
	sum := 0.0
	for i := 1; i < len(ps); i++ {
		sum += float64(ps[i-1].ready) * (ps[i].at - ps[i-1].at)
	}
	return sum
}
