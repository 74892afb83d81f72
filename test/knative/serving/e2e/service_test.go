package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/autoscaling"
	asv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// The config-autoscaler Knative's controller reads from its ConfigMap and
// tidal's services from files: short windows so each phase takes seconds, a
// per-pod target of 10, and target-burst-capacity 0, so the ServerlessService
// serves from the pods whenever pods are wanted and puts the activator in
// the path only at zero (Knative's rule: Serve when want > 0 and excess burst
// capacity >= 0, which TBC 0 makes 0).
var autoscalerConfig = map[string]string{
	"stable-window":                        "6s",
	"scale-to-zero-grace-period":           "6s",
	"container-concurrency-target-default": "10",
	"target-burst-capacity":                "0",
}

const (
	// target and utilization are the per-pod concurrency target above and
	// Knative's default container-concurrency-target-percentage (70).
	target, utilization = 10.0, 0.70
	stableWindow        = 6 * time.Second
	gracePeriod         = 6 * time.Second
	// serviceTime is how long the simulated pods take per request, so a
	// steady rate of r requests a second keeps r × serviceTime in flight
	// (Little's law).
	serviceTime = time.Second
	// Images by digest: Knative's revision reconciler takes a digest as
	// resolved (pkg/reconciler/revision/resolve.go) and never asks a
	// registry; kwok runs no containers.
	userImage  = "registry.invalid/tidal-e2e/web@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	queueImage = "registry.invalid/knative-serving/queue@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	// actuatorManager is the field manager of every write tidal's actuator
	// makes (actuator/scale.FieldManager).
	actuatorManager = "tidal-actuator"
)

// kpaWant is the pod count Knative's KPA settles on for a steady total
// concurrency, out of panic mode (pkg/autoscaler/scaling/autoscaler.go,
// v0.50.0): ceil(total / (target × utilization)); the scale-up rate (1000×)
// and scale-down rate (at most halving per decision) bound only the steps.
func kpaWant(total float64) int32 {
	return int32(math.Ceil(total / (target * utilization)))
}

// TestKnativeServiceScaledByTidal runs Knative Serving's real controller
// and tidal's three services in Knative mode against a fresh test cluster,
// creates a Knative Service as the webhook would have defaulted it, and
// follows it: its Revision's PodAutoscaler reconciled by tidal (status
// written by tidal's actuator, its ServerlessService created by tidal and
// owned by the PodAutoscaler), the Revision and the Service Ready, queue-proxy
// load scaling the Deployment up and down to the KPA's numbers, scale to
// zero after the grace period with the ServerlessService in Proxy mode once
// Knative's activator probe handler answers, and back to one pod on a
// request counted by Knative's activator code and reported over the real
// websocket to the collector.
func TestKnativeServiceScaledByTidal(t *testing.T) {
	// The load phases: steady rates of requests taking serviceTime each.
	phases := []struct {
		name string
		rate float64 // requests a second
		up   bool
	}{
		{"step up", 32, true},    // 32 in flight: ceil(32 / 7) = 5 pods
		{"step down", 10, false}, // 10 in flight: ceil(10 / 7) = 2 pods
	}
	s := startScene(t)
	ctx, kc, sc, nc := context.Background(), s.kc, s.sc, s.nc
	ns, rev, svcName := s.ns, s.rev, s.svcName
	start := s.createService(t, nil)
	rate, reps := s.rate, s.reps

	// Tidal reconciles the Revision's PodAutoscaler: the ServerlessService
	// it creates and owns, the status it writes, and Knative's controller
	// takes the Revision and the Service to Ready.
	var pa *asv1alpha1.PodAutoscaler
	s.waitRevisionReady(t)
	t.Logf("revision %s Ready %s after the Service was created", rev, time.Since(start).Round(100*time.Millisecond))
	// The first load phase starts now: with no load, tidal would take the
	// Revision to zero a stable window and a grace period from here.
	phaseFrom := time.Now()
	rate.Set(phases[0].rate)
	eventually(t, kc, 60*time.Second, "the Service Ready", func() (bool, string) {
		got, err := sc.ServingV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.IsReady(), fmt.Sprintf("conditions %+v", got.Status.Conditions)
	})
	pa = s.waitTidalPA(t)
	checkReconciledByTidal(ctx, t, sc, nc, pa, ns, rev)

	// Load: steady rates, each held until the Deployment settles where the
	// KPA says and then for two more stable windows.
	for i, ph := range phases {
		want := kpaWant(ph.rate * serviceTime.Seconds())
		if i > 0 {
			phaseFrom = time.Now()
			rate.Set(ph.rate)
		}
		from := phaseFrom
		reps.waitReady(t, kc, want, 90*time.Second, ph.name)
		settled := time.Since(from)
		time.Sleep(2 * stableWindow)
		lo, hi := reps.bounds(from)
		t.Logf("%s: %.0f requests/s → %d pods after %s (replicas within [%d, %d])", ph.name, ph.rate, want, settled.Round(100*time.Millisecond), lo, hi)
		if got := reps.last().spec; got != want {
			t.Errorf("%s: replicas %d two stable windows after settling, want %d", ph.name, got, want)
		}
		// Down: the stable window's average falls from the old load to
		// the new one and never below it, so the KPA never wants fewer
		// pods than it settles on. Up has no such bound: in panic mode
		// per-second stats of pods that just turned Ready can overshoot
		// for a panic window, and the KPA does not scale down in panic.
		if !ph.up && lo < want {
			t.Errorf("%s: replicas fell to %d, below the KPA's %d", ph.name, lo, want)
		}
	}

	// No load: zero after the stable window (to decide 0) and the grace
	// period, with the activator in the path.
	s.scaleToZero(t, "tidal")

	// A request reaches the activator (the public Service's Endpoints are
	// the activator's now): Knative's ConcurrencyReporter sends its
	// first-request stat over the websocket to tidal's collector, and
	// tidal brings the Revision back to kpaWant(1) = 1 pod.
	recordedBefore := collectorMetric(t, s.tidal.Collectors[0], `tidal_collector_activator_stats_total{outcome="recorded"}`)
	s.backFromZero(t, "tidal")
	if got := collectorMetric(t, s.tidal.Collectors[0], `tidal_collector_activator_stats_total{outcome="recorded"}`); got <= recordedBefore {
		t.Errorf("the collector recorded %v activator stats, %v before the request: Knative's activator code did not reach it", got, recordedBefore)
	}
}

// checkReconciledByTidal checks who wrote the PodAutoscaler's status and
// its ServerlessService, and that nothing else of Knative's autoscaler was
// made.
func checkReconciledByTidal(ctx context.Context, t *testing.T, sc servingclient.Interface, nc netclient.Interface,
	pa *asv1alpha1.PodAutoscaler, ns, rev string,
) {
	t.Helper()
	if got := pa.Annotations[autoscaling.ClassAnnotationKey]; got != autoscaling.KPA {
		t.Errorf("PodAutoscaler class %q, want %q", got, autoscaling.KPA)
	}
	if owner := metav1.GetControllerOf(pa); owner == nil || owner.Kind != "Revision" || owner.Name != rev {
		t.Errorf("PodAutoscaler controller %+v, want the Revision %s", owner, rev)
	}
	if got := managers(pa.ManagedFields, "status"); len(got) != 1 || got[0] != actuatorManager {
		t.Errorf("PodAutoscaler status written by %q, want only %q", got, actuatorManager)
	}
	if pa.Status.ServiceName != rev || pa.Status.MetricsServiceName != rev+"-private" {
		t.Errorf("PodAutoscaler status serviceName %q, metricsServiceName %q; want %q and %q",
			pa.Status.ServiceName, pa.Status.MetricsServiceName, rev, rev+"-private")
	}
	for _, cond := range []apis.ConditionType{asv1alpha1.PodAutoscalerConditionActive,
		asv1alpha1.PodAutoscalerConditionScaleTargetInitialized, asv1alpha1.PodAutoscalerConditionSKSReady} {
		if c := pa.Status.GetCondition(cond); c == nil || !c.IsTrue() {
			t.Errorf("PodAutoscaler condition %s = %+v, want True", cond, c)
		}
	}
	sks, err := nc.NetworkingV1alpha1().ServerlessServices(ns).Get(ctx, rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(sks, pa) {
		t.Errorf("ServerlessService owners %+v, want the PodAutoscaler %s as controller", sks.OwnerReferences, rev)
	}
	if got := managers(sks.ManagedFields, ""); len(got) != 1 || got[0] != actuatorManager {
		t.Errorf("ServerlessService spec written by %q, want only %q", got, actuatorManager)
	}
	if sks.Status.PrivateServiceName != rev+"-private" || !sks.Status.GetCondition(netv1alpha1.ServerlessServiceConditionReady).IsTrue() {
		t.Errorf("ServerlessService status %+v, want Ready (Knative's SKS reconciler) with private service %s-private", sks.Status, rev)
	}
	// Knative's KPA reconciler would create a Metric for its autoscaler;
	// tidal's does not.
	ms, err := sc.AutoscalingV1alpha1().Metrics(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms.Items) != 0 {
		t.Errorf("%d Metric objects, want none", len(ms.Items))
	}
}

// managers lists the field managers of entries for subresource ("" the
// main resource) that own fields.
func managers(entries []metav1.ManagedFieldsEntry, subresource string) []string {
	var out []string
	for _, e := range entries {
		if e.Subresource == subresource && e.FieldsV1 != nil {
			out = append(out, e.Manager)
		}
	}
	return out
}

// eventually is testkit.Eventually failing t at once if Knative's process
// kc exits, and after within with cond's last explanation.
func eventually(t *testing.T, kc *knProcess, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var why string
	testkit.Eventually(t, within, what, func() bool {
		var ok bool
		if ok, why = cond(); ok {
			return true
		}
		kc.running(t)
		return false
	}, func() string { return why })
}

// replicas is one reading of the Deployment.
type replicas struct {
	at          time.Time
	spec, ready int32
}

// replicaLog reads the Deployment every 100 ms.
type replicaLog struct {
	mu   sync.Mutex
	seen []replicas
}

func followReplicas(t *testing.T, c *cluster.Cluster, ns, name string) *replicaLog {
	l := &replicaLog{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			if d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && d.Spec.Replicas != nil {
				l.mu.Lock()
				l.seen = append(l.seen, replicas{time.Now(), *d.Spec.Replicas, d.Status.ReadyReplicas})
				l.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return l
}

func (l *replicaLog) last() replicas {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) == 0 {
		return replicas{spec: -1, ready: -1}
	}
	return l.seen[len(l.seen)-1]
}

// after returns the latest reading once one was taken at or after from.
func (l *replicaLog) after(t *testing.T, from time.Time) replicas {
	t.Helper()
	var r replicas
	testkit.Eventually(t, 10*time.Second, "a reading of the replicas after "+from.Format(time.StampMilli), func() bool {
		r = l.last()
		return !r.at.Before(from)
	})
	return r
}

// bounds returns the least and most spec replicas read since from.
func (l *replicaLog) bounds(from time.Time) (lo, hi int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lo, hi = math.MaxInt32, -1
	for _, r := range l.seen {
		if r.at.Before(from) {
			continue
		}
		lo, hi = min(lo, r.spec), max(hi, r.spec)
	}
	return lo, hi
}

func (l *replicaLog) waitSpec(t *testing.T, kc *knProcess, want int32, within time.Duration, what string) {
	t.Helper()
	eventually(t, kc, within, fmt.Sprintf("%s: %d replicas", what, want), func() (bool, string) {
		r := l.last()
		return r.spec == want, fmt.Sprintf("replicas %d, ready %d", r.spec, r.ready)
	})
}

func (l *replicaLog) waitReady(t *testing.T, kc *knProcess, want int32, within time.Duration, what string) {
	t.Helper()
	eventually(t, kc, within, fmt.Sprintf("%s: %d replicas, all ready", what, want), func() (bool, string) {
		r := l.last()
		return r.spec == want && r.ready == want, fmt.Sprintf("replicas %d, ready %d", r.spec, r.ready)
	})
}

// collectorMetric reads one series of a collector's /metrics; 0 when
// absent.
func collectorMetric(t *testing.T, p *system.Proc, series string) float64 {
	t.Helper()
	v, err := p.Metric(series)
	if err != nil && !errors.Is(err, system.ErrNoSeries) {
		t.Fatal(err)
	}
	return v
}
