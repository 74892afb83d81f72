package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/test/testkit"
)

var coldStartWakeups = flag.Int("coldstart-wakeups", 0, "TestColdStartRace's wake-ups from zero for each autoscaler (`make bench-coldstart`); 0 skips it.")

// wake is one wake-up from zero, timed from the request reaching the
// activator.
type wake struct {
	scaled   time.Duration // to the Deployment's spec.replicas leaving zero, as an informer sees it
	answered time.Duration // to the request's answer
	// tidal's split, from its actuator's log (0 when not logged): to the
	// decision (its sequence, the decider's clock in milliseconds: the
	// collector and the decider), to the scale write's start (the Scale
	// call and the actuator's pass) and to its return.
	decided, issued, written time.Duration
}

// TestColdStartRace is `make bench-coldstart`: on one test cluster with
// Knative's controller and activator binary and the same simulated pods,
// a revision at zero (Knative's default target-burst-capacity, the
// activator in the path) takes a request; the wake-up is timed from the
// request reaching the activator to the Deployment's spec.replicas leaving
// zero (the autoscaler's share) and to the answer. tidal in Knative mode,
// with bucket Leases as the chart runs it, first, then Knative's own autoscaler (cmd/autoscaler) after tidal is
// stopped, -coldstart-wakeups each; it logs each side's p50 and p99 and
// the ratios. A system run, not a check of speed: it fails only when a
// wake-up fails.
func TestColdStartRace(t *testing.T) {
	n := *coldStartWakeups
	if n == 0 {
		t.Skip("the cold-start race of `make bench-coldstart`; -coldstart-wakeups turns it on")
	}
	s := startScene(t, withPodTraffic, withLeases)
	act := startActivator(t, s)
	ctx := context.Background()
	s.createService(t, nil)
	s.waitRevisionReady(t)
	s.waitTidalPA(t)
	scaled := watchScaleFromZero(t, s)

	tidal := coldStarts(t, s, act, scaled, "tidal", n, func() (decided, issued, written time.Time, ok bool) { return lastWakeLogged(s) })

	// Knative's autoscaler, as in TestUninstallGivesPodAutoscalersBack,
	// with the same activator binary reporting to it.
	if err := s.tidal.Stop(); err != nil {
		t.Fatalf("stop tidal: %v", err)
	}
	_ = s.act.Conn.Shutdown()
	knStats := fmt.Sprintf("127.0.0.1:%d", autoscalerStatsPort)
	act.autoscaler.Store(&knStats)
	wrapper := filepath.Join(t.TempDir(), "autoscaler")
	withHosts(t, s.knBins.Autoscaler, wrapper, s.hosts())
	ka := startAutoscaler(t, wrapper, s.c)
	ka.waitLeader(ctx, t, s.c, "autoscaler-bucket", time.Minute)
	testkit.Eventually(t, 60*time.Second, "Knative's autoscaler's Metric for the Revision", func() bool {
		_, err := s.sc.AutoscalingV1alpha1().Metrics(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		return err == nil
	})
	s.kc = ka // the waits below fail at once if Knative's autoscaler exits
	knative := coldStarts(t, s, act, scaled, "Knative", n, nil)

	report := func(what string, f func(wake) time.Duration) {
		tp50, tp99 := percentiles(tidal, f)
		kp50, kp99 := percentiles(knative, f)
		t.Logf("%-40s tidal p50 %8s p99 %8s | Knative p50 %8s p99 %8s | tidal/Knative p50 %.2f p99 %.2f",
			what, ms(tp50), ms(tp99), ms(kp50), ms(kp99), float64(tp50)/float64(kp50), float64(tp99)/float64(kp99))
	}
	t.Logf("cold-start race, %d wake-ups each, from the request reaching Knative's activator:", n)
	report("to spec.replicas > 0 (autoscaler share)", func(w wake) time.Duration { return w.scaled })
	report("to the answer", func(w wake) time.Duration { return w.answered })
	var split []wake
	for _, w := range tidal {
		if w.decided != 0 {
			split = append(split, w)
		}
	}
	if len(split) == 0 {
		t.Logf("tidal's split: no wake-up found in its actuator's log")
		return
	}
	t.Logf("tidal's split over the %d of %d wake-ups its actuator logged (the decision's time is in whole milliseconds):", len(split), len(tidal))
	for _, part := range []struct {
		what string
		f    func(wake) time.Duration
	}{
		{"to the decision (collector, decider)", func(w wake) time.Duration { return w.decided }},
		{"decision to the scale write (actuator)", func(w wake) time.Duration { return w.issued - w.decided }},
		{"scale write's start to the informer", func(w wake) time.Duration { return w.scaled - w.issued }},
		{"scale write's start to its return", func(w wake) time.Duration { return w.written - w.issued }},
	} {
		p50, p99 := percentiles(split, part.f)
		t.Logf("  %-40s p50 %8s p99 %8s", part.what, ms(p50), ms(p99))
	}
}

// lastWakeLogged reads tidal's actuator's log for its last scale of the
// revision from zero: the decision's time (its sequence), and when the
// scale write started and returned.
func lastWakeLogged(s *scene) (decided, issued, written time.Time, ok bool) {
	for _, p := range s.tidal.Procs() {
		if !strings.Contains(p.Name, "actuator") {
			continue
		}
		lines := strings.Split(p.LogTail(500), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			var l struct {
				Msg      string  `json:"msg"`
				TS       float64 `json:"ts"`
				From, To int32
				Sequence int64
				Write    *float64 // seconds; only the reconciler's line (the Scale handler logs one after the call)
			}
			if json.Unmarshal([]byte(lines[i]), &l) != nil || l.Msg != "scaled" || l.Write == nil || l.From != 0 || l.To == 0 {
				continue
			}
			written := time.Unix(0, int64(l.TS*float64(time.Second)))
			return time.UnixMilli(l.Sequence), written.Add(-time.Duration(*l.Write * float64(time.Second))), written, true
		}
	}
	return time.Time{}, time.Time{}, time.Time{}, false
}

// coldStarts times n wake-ups from zero of s's revision with the autoscaler
// in charge (who): each waits for zero (the Deployment at 0 and the private
// Endpoints empty, so the activator knows no pod), then sends one request
// through the activator. logged, when set, tells the decision's time and
// when the scale write started and returned, as the autoscaler logged them.
func coldStarts(t *testing.T, s *scene, act *realActivator, scaled <-chan time.Time, who string, n int,
	logged func() (decided, issued, written time.Time, ok bool),
) []wake {
	t.Helper()
	ctx := context.Background()
	out := make([]wake, 0, n)
	for i := range n {
		s.reps.waitSpec(t, s.kc, 0, 90*time.Second, fmt.Sprintf("%s: wake-up %d: at zero", who, i))
		testkit.Eventually(t, 30*time.Second, "the private Endpoints empty", func() bool {
			eps, err := s.kube.CoreV1().Endpoints(s.ns).Get(ctx, s.rev+"-private", metav1.GetOptions{})
			return err == nil && len(eps.Subsets) == 0
		})
		select { // a scale-up seen before this wake-up is not its own
		case <-scaled:
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		start := time.Now()
		code, body, err := act.request(rctx, s)
		answered := time.Since(start)
		cancel()
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, s.rev+"-deployment-") {
			t.Fatalf("%s: wake-up %d: answered %d %q (%v), want 200 from a pod", who, i, code, body, err)
		}
		var w wake
		select {
		case at := <-scaled:
			w = wake{scaled: at.Sub(start), answered: answered}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: wake-up %d: answered, but no scale from zero seen", who, i)
		}
		split := ""
		if logged != nil {
			if decided, issued, written, ok := logged(); ok && decided.After(start.Add(-time.Millisecond)) {
				w.decided, w.issued, w.written = max(decided.Sub(start), time.Nanosecond), issued.Sub(start), written.Sub(start)
				split = fmt.Sprintf(" (decided after %s, its scale write sent after %s, returned after %s)", ms(w.decided), ms(w.issued), ms(w.written))
			}
		}
		out = append(out, w)
		t.Logf("%s: wake-up %d: spec.replicas > 0 after %s, answered after %s%s", who, i, ms(w.scaled), ms(w.answered), split)
	}
	return out
}

// watchScaleFromZero informs on the revision's Deployment and sends the
// time each update takes spec.replicas from 0 to more; the channel holds
// one (a wake-up drains it first).
func watchScaleFromZero(t *testing.T, s *scene) <-chan time.Time {
	t.Helper()
	ch := make(chan time.Time, 1)
	lw := cache.NewListWatchFromClient(s.c.Client.AppsV1().RESTClient(), "deployments", s.ns,
		fields.OneTermEqualSelector("metadata.name", s.rev+"-deployment"))
	inf := cache.NewSharedIndexInformer(lw, &appsv1.Deployment{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		at := time.Now()
		o, n := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
		if o.Spec.Replicas != nil && *o.Spec.Replicas == 0 && n.Spec.Replicas != nil && *n.Spec.Replicas > 0 {
			select {
			case ch <- at:
			default:
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { inf.Run(stop); close(done) }()
	t.Cleanup(func() { close(stop); <-done })
	if !cache.WaitForCacheSync(context.Background().Done(), inf.HasSynced) {
		t.Fatal("deployment informer did not sync")
	}
	return ch
}

// percentiles returns the p50 and p99 of f over ws (nearest rank).
func percentiles(ws []wake, f func(wake) time.Duration) (p50, p99 time.Duration) {
	ds := make([]time.Duration, len(ws))
	for i, w := range ws {
		ds[i] = f(w)
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		return ds[max(0, int(math.Ceil(p*float64(len(ds))))-1)]
	}
	return rank(0.50), rank(0.99)
}

// ms prints d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
