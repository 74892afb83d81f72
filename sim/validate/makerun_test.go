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

// fnSteps is `make run`'s fn produce rate, the same as
// ../testdata/makerun-fn.csv.
var fnSteps = podmodel.Steps{{At: 0, Rate: 0}, {At: 20 * time.Second, Rate: 400}, {At: 23 * time.Second, Rate: 0},
	{At: 115 * time.Second, Rate: 60}, {At: 145 * time.Second, Rate: 0}}

const profileLength = 175 * time.Second

// point is one 2 s sample of ready pods, at seconds since the load began;
// live samples also keep the decision for the log.
type point struct {
	at    float64
	ready int32
	// desired and state are the live decider's (Explain); "" for replays.
	desired int32
	state   string
}

// TestMakeRunProfile runs `make run`'s two targets through the live
// collector, decider and actuator on the test cluster for the profile's
// 175 s: the KPA target web (its annotations, 6 s scale-to-zero grace,
// 100 ms service time, 500 ms cold start) and the Function fn (riff-queue on
// 4 partitions, 5 s idle timeout, 40 records/s a pod, on a kfake broker). It
// replays the same profiles and configurations
// (../testdata/makerun{,-fn}.{csv,yaml}) through package sim and compares
// the ready pods, sampled every 2 s as make run samples them.
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
//   - fn's times carry the same ±4 s for leaving zero, but ±15 s for
//     reaching it: the live consumer group rebalances at every scale step
//     (each member's join or leave moves partitions, which pause), which
//     the replay's partition model does not, so the live backlog drains
//     later and the 5 s idle timeout starts later (6, 8 and 12 s later in
//     three runs);
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
	// TIDAL_E2E_KEEP_LOGS=1 keeps each process's log, as in test/e2e.
	keep := os.Getenv("TIDAL_E2E_KEEP_LOGS") != ""
	s, err := system.Start(startCtx, system.Options{BinDir: bin, Cluster: c, Kafka: true, KeepLogs: keep,
		AutoscalerConfig: map[string]string{"scale-to-zero-grace-period": "6s"}})
	if err != nil {
		t.Fatalf("start system: %v", err)
	}
	if keep {
		t.Logf("service logs kept in %s", s.LogDir)
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
	idle := 5 * time.Second
	fn, err := s.StartFunction(ctx, system.FunctionOptions{
		Namespace: ns, Name: "fn", Topic: "orders", Partitions: 4, IdleTimeout: &idle,
		Produce: fnSteps, RatePerPod: 40, ColdStart: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Stop()
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
	var live, liveFn []point
	var ledger system.Ledger
	obs.Follow(runCtx, []system.Target{web, fn}, 2*time.Second, 1200*time.Millisecond, func(i int, smp system.Sample) {
		p := point{at: smp.Time.Sub(start).Seconds(), ready: max(smp.Ready, 0), desired: smp.Desired, state: smp.State()}
		if i == 1 {
			liveFn = append(liveFn, p)
			return
		}
		live = append(live, p)
		ledger.Add(smp)
	}, func(err error) { t.Logf("sample: %v", err) })
	stop()
	wg.Wait()
	exp := web.Experience(&ledger)

	// The replays.
	res := replay(t, "makerun")
	resFn := replay(t, "makerun-fn")
	replayed := at(live, res)
	replayedFn := at(liveFn, resFn)
	var b strings.Builder
	// Live ready pods with the live decider's desired scale and state.
	fmt.Fprintf(&b, "%8s %22s %9s %22s %8s\n", "seconds", "web live (desired)", "web sim", "fn live (desired)", "fn sim")
	for i := range live {
		fl, fr := "", ""
		if i < len(liveFn) {
			fl, fr = fmt.Sprintf("%d (%d %s)", liveFn[i].ready, liveFn[i].desired, liveFn[i].state), fmt.Sprint(replayedFn[i].ready)
		}
		wl := fmt.Sprintf("%d (%d %s)", live[i].ready, live[i].desired, live[i].state)
		fmt.Fprintf(&b, "%8.1f %22s %9d %22s %8s\n", live[i].at, wl, replayed[i].ready, fl, fr)
	}
	t.Logf("ready pods, live and replayed:\n%s", b.String())
	t.Logf("web live: %s", exp)
	t.Logf("web sim: cold starts %d, pod-seconds %.0f, scale events %d", res.ColdStarts, res.PodSeconds, res.ScaleEvents)
	t.Logf("fn sim: cold starts %d, pod-seconds %.0f, scale events %d", resFn.ColdStarts, resFn.PodSeconds, resFn.ScaleEvents)

	for _, c := range compare(live, replayed, webTimes, webSteady) {
		t.Error("web: " + c)
	}
	for _, c := range compare(liveFn, replayedFn, fnTimes, fnSteady) {
		t.Error("fn: " + c)
	}
	for _, c := range []struct {
		name         string
		live, replay []point
	}{{"web", live, replayed}, {"fn", liveFn, replayedFn}} {
		if l, r := coldStarts(c.live, 10), coldStarts(c.replay, 10); l != r {
			t.Errorf("%s: cold starts after 10 s: live %d, replay %d; want equal", c.name, l, r)
		}
		if l, r := podSeconds(c.live), podSeconds(c.replay); math.Abs(l-r) > 0.2*r {
			t.Errorf("%s: pod-seconds (2 s samples): live %.0f, replay %.0f; want within 20 %%", c.name, l, r)
		}
	}
}

// replay runs ../testdata/NAME.csv through the first configuration of
// ../testdata/NAME.yaml.
func replay(t *testing.T, name string) *sim.Result {
	t.Helper()
	cfgData, err := os.ReadFile("../testdata/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := sim.ParseFile(cfgData)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../testdata/" + name + ".csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.ReadRates(f, name+".csv")
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(&tr, &cfgs[0], sim.Options{Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// at is the replay's ready pods at the live samples' times since the start.
func at(live []point, res *sim.Result) []point {
	out := make([]point, 0, len(live))
	for _, p := range live {
		i := min(max(int(p.at), 0), len(res.Timeline)-1)
		out = append(out, point{at: p.at, ready: res.Timeline[i].Ready})
	}
	return out
}

// timeCheck is when a target first reaches a state after a given second,
// live and replayed, within a tolerance.
type timeCheck struct {
	what      string
	from      float64
	cond      func(int32) bool
	tolerance float64
}

// steadyCheck holds live and replayed ready pods within one pod over a phase.
type steadyCheck struct {
	what     string
	from, to float64
}

var (
	webTimes = []timeCheck{
		{"scale-up to 3 pods after the step at 20 s", 20, func(n int32) bool { return n >= 3 }, 4},
		{"zero after the load goes at 80 s", 80, func(n int32) bool { return n == 0 }, 6},
		{"leaving zero after the load returns at 115 s", 115, func(n int32) bool { return n > 0 }, 4},
		{"zero after the load goes at 145 s", 145, func(n int32) bool { return n == 0 }, 6},
	}
	webSteady = []steadyCheck{
		{"warm-up", 6, 20}, {"steady load", 32, 60}, {"after the drop", 72, 80}, {"returned load, settled", 134, 145}, {"quiet", 160, 175},
	}
	fnTimes = []timeCheck{
		{"leaving zero after the burst at 20 s", 20, func(n int32) bool { return n > 0 }, 4},
		{"zero after the backlog drains and the 5 s idle timeout", 24, func(n int32) bool { return n == 0 }, 15},
		{"leaving zero after records return at 115 s", 115, func(n int32) bool { return n > 0 }, 4},
		{"zero after the records stop at 145 s", 145, func(n int32) bool { return n == 0 }, 15},
	}
	fnSteady = []steadyCheck{{"idle before the burst", 6, 20}, {"idle", 60, 114}, {"steady records", 126, 145}, {"quiet", 164, 175}}
)

// compare checks the phase by phase tolerances of TestMakeRunProfile.
func compare(live, replay []point, times []timeCheck, steady []steadyCheck) []string {
	var errs []string
	first := func(ps []point, from float64, cond func(int32) bool) float64 {
		for _, p := range ps {
			if p.at >= from && cond(p.ready) {
				return p.at
			}
		}
		return math.Inf(1)
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
	for _, c := range steady {
		for i := range live {
			if live[i].at < c.from || live[i].at >= c.to {
				continue
			}
			if i >= len(replay) {
				break
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
