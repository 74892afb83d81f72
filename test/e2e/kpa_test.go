package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
	"github.com/tidalscale/tidal/test/workload"
)

// The KPA scenario's settings: a 6 s stable window with a 3 s panic window
// (50 %), 10 concurrent requests per pod at 70 % utilisation (7 per pod),
// requests of 100 ms, so a load of L requests per second is a concurrency
// of L/10 and needs ceil(L/70) pods.
const (
	kpaWindow      = 6 * time.Second
	kpaGrace       = 6 * time.Second // kpaConfig's scale-to-zero-grace-period
	kpaServiceTime = 100 * time.Millisecond
	kpaPerPod      = 7.0
	lightLoad      = 10.0  // concurrency 1: one pod
	heavyLoad      = 300.0 // concurrency 30: five pods
)

var kpaAnnotations = map[string]string{
	"autoscaling.knative.dev/window":                        kpaWindow.String(),
	"autoscaling.knative.dev/panic-window-percentage":       "50",
	"autoscaling.knative.dev/target":                        "10",
	"autoscaling.knative.dev/target-utilization-percentage": "70",
}

func podsFor(load float64) int32 {
	return int32(math.Ceil(load * kpaServiceTime.Seconds() / kpaPerPod))
}

// startKPA starts the KPA workload "web" in a new namespace with the given
// load and records it.
func startKPA(t *testing.T, s *system.System, load *system.Dial) (*system.KPATarget, *recorder) {
	t.Helper()
	ns := s.Cluster.Namespace(t)
	k, err := s.StartKPA(context.Background(), system.KPAOptions{
		Namespace: ns, Name: "web", Annotations: kpaAnnotations, Replicas: 1, Profile: load,
		Model: workload.ModelConfig{ServiceTime: kpaServiceTime, ColdStart: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k, record(t, s, k, kpaRule)
}

// TestKPA drives one PodAutoscaler through every KPA phase with the three
// services as separate processes: a step from light to heavy load enters
// panic and scales up within two ticks; steady load keeps the scale steady;
// removing the load scales down no faster than max-scale-down-rate allows
// and reaches 0 desired only after a whole stable window; the Deployment
// goes to zero only after the grace period; an activator stat brings it back
// from zero at once. At every tick the Deployment's replicas follow the
// decider's Explain under the reconciler's rules.
func TestKPA(t *testing.T) {
	s := startSystem(t, system.Options{})
	load := system.NewDial(lightLoad)
	k, rec := startKPA(t, s, load)

	// Warm up: one pod serving the light load, and a valid decision of 1.
	testkit.Eventually(t, 90*time.Second, "a decision of 1 with 1 ready pod under light load", func() bool {
		l, ok := rec.last()
		return ok && l.Known && l.Desired == 1 && l.Replicas == 1 && l.Ready == 1
	})

	// Step to heavy load: panic and a scale-up by the second tick after.
	stepAt := time.Now()
	load.Set(heavyLoad)
	second := system.NextTick(stepAt, tick, 0).Add(tick)
	smp := rec.waitSample(second, 3*tick)
	if !smp.Decision.GetPanicking() || smp.Desired < 2 || smp.Replicas < 2 {
		t.Errorf("second tick after the step to %v req/s: panicking %v, desired %d, replicas %d; want panic and a scale-up to at least 2",
			heavyLoad, smp.Decision.GetPanicking(), smp.Desired, smp.Replicas)
	}
	want := podsFor(heavyLoad)
	// Panic holds its high-water mark for a stable window after the last
	// tick over the threshold, then the scale settles.
	testkit.Eventually(t, 30*time.Second, "panic to end and the scale to settle at the heavy load's pods", func() bool {
		l, _ := rec.last()
		return !l.Decision.GetPanicking() && l.Desired == want && l.Replicas == want && l.Ready == want
	})

	// Steady load: not one change of scale over three windows.
	steadyFrom := time.Now()
	time.Sleep(3 * kpaWindow)
	for _, s := range rec.since(steadyFrom) {
		if s.Desired != want || s.Replicas != want {
			t.Errorf("steady load at t=%.1fs: desired %d, replicas %d; want %d throughout (flapping)", s.Time.Sub(rec.start).Seconds(), s.Desired, s.Replicas, want)
		}
	}

	// Remove the load: scale down at most by max-scale-down-rate (2) per
	// tick, and to 0 desired only after a whole stable window of zeros.
	removeAt := time.Now()
	load.Set(0)
	zeroDecision := testkit.Eventually(t, kpaWindow+30*time.Second, "desired 0 after the load went", func() bool {
		l, _ := rec.last()
		return l.Known && l.Desired == 0
	})
	var firstZero time.Time
	for _, s := range rec.since(removeAt) {
		if s.KPA == nil || s.Desired < 0 {
			continue
		}
		if floor := int32(math.Floor(math.Max(1, float64(s.KPA.GetReadyPods())) / 2)); s.Desired < floor {
			t.Errorf("scale-down at t=%.1fs: desired %d with %d ready pods; want at least %d (max-scale-down-rate 2)",
				s.Time.Sub(rec.start).Seconds(), s.Desired, s.KPA.GetReadyPods(), floor)
		}
		if s.Desired == 0 && firstZero.IsZero() {
			firstZero = s.Decision.GetDecideTime().AsTime()
		}
	}
	if firstZero.IsZero() {
		firstZero = zeroDecision
	}
	if d := firstZero.Sub(removeAt); d < kpaWindow-500*time.Millisecond {
		t.Errorf("desired reached 0 %s after the load went; want at least the %s stable window", d, kpaWindow)
	}

	// Idle: the Deployment goes to zero after the grace period, not before.
	zeroAt := testkit.Eventually(t, kpaGrace+4*tick+10*time.Second, "the Deployment at 0 replicas", func() bool {
		l, _ := rec.last()
		return l.Replicas == 0
	})
	if d := zeroAt.Sub(firstZero); d < kpaGrace-time.Second {
		t.Errorf("scaled to zero %s after the first decision of 0; want the %s grace period first", d, kpaGrace)
	}
	for _, s := range rec.since(firstZero) {
		if s.Time.Before(firstZero.Add(kpaGrace-time.Second)) && s.Replicas == 0 {
			t.Errorf("at t=%.1fs: 0 replicas within the grace period", s.Time.Sub(rec.start).Seconds())
		}
	}

	// Scale from zero: requests arrive, the activator reports them, and a
	// poke scales up at once, before the next tick.
	col, err := s.Collectors[0].Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	collector := collectorv1.NewCollectorServiceClient(col)
	load.Set(lightLoad)
	pushAt := time.Now()
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	var fromZero system.Sample
	upAt := testkit.Eventually(t, 3*tick, "a scale-up from zero after an activator stat", func() bool {
		_, err := collector.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: &commonv1.TargetRef{Namespace: k.Namespace, Name: k.Name}, PodName: "activator-0",
			AverageConcurrency: 1, RequestCount: lightLoad,
		}}})
		if err != nil {
			t.Fatalf("PushStats: %v", err)
		}
		fromZero, err = obs.Sample(context.Background(), k)
		return err == nil && fromZero.Replicas >= 1
	})
	t.Logf("scaled from zero %s after the first activator stat (decision %q, trigger %s)",
		upAt.Sub(pushAt).Round(time.Millisecond), fromZero.Decision.GetReason(), fromZero.KPA.GetTrigger())
	if d := upAt.Sub(pushAt); d > tick {
		t.Errorf("scale from zero took %s; want less than a tick (%s): an activator stat at zero pokes", d, tick)
	}
	testkit.Eventually(t, 30*time.Second, "the queued requests served", func() bool {
		r := k.Workload.Report()
		return r.WarmPods >= 1 && r.Queued == 0
	})
	time.Sleep(2 * tick) // a few more ticks checked against Explain
	rec.stop()
	rec.checkViolations()

	l := rec.ledgerCopy()
	exp := k.Experience(&l)
	t.Logf("what users felt and what it cost: %s", exp)
	if exp.Report.Served == 0 || exp.ColdStarts < 1 || exp.PodSeconds <= 0 {
		t.Errorf("experience %s: want requests served, a cold start and pod-seconds spent", exp)
	}
	// Requests that came while there were no pods waited for the pod's
	// 500 ms cold start, less at most one arrival gap (the pod may turn
	// Ready just before the first of them arrives).
	if minWait := 500*time.Millisecond - time.Duration(float64(time.Second)/lightLoad); exp.Report.Wait.Max < minWait {
		t.Errorf("longest wait %s: want at least %s, the cold start of the scale from zero less one arrival gap", exp.Report.Wait.Max, minWait)
	}
	t.Logf("samples:\n%s", rec.table())
}
