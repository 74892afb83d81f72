package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// Sizes of TestWriteBudget: 1,000 targets in 4 namespaces, 10 of each
// namespace's at zero; the actuator's budget far below what the decisions
// ask for at once (each change is a status write, a scale patch and an
// Event).
const (
	budgetNamespaces = 4
	budgetBusy       = 240 // per namespace, at 3 replicas
	budgetSleepers   = 10  // per namespace, at 0
	budgetQPS        = 50
	// wakeEvery spaces the wakes: 5 a second, a fifth of the budget.
	wakeEvery = 200 * time.Millisecond
)

// budgetTarget is one of budgetScene's targets.
type budgetTarget struct{ ns, name string }

// budgetScene is 1,000 targets (a Deployment and a PodAutoscaler each) in
// budgetNamespaces namespaces, every PodAutoscaler reconciled once by an
// actuator with the default budget that has stopped since, and a watch of
// every value each Deployment's spec.replicas takes from then on.
type budgetScene struct {
	kubeconfig string
	nss        []string
	namespaces string // the actuator's --namespaces flag
	busy       []budgetTarget
	sleepers   []budgetTarget

	mu   sync.Mutex
	seen map[budgetTarget][]int32
	// at is when each target's spec.replicas was last seen to change.
	at map[budgetTarget]time.Time
}

func newBudgetScene(t *testing.T) *budgetScene {
	c := cluster.Shared(t)
	ctx := context.Background()
	rc := c.Config()
	rc.QPS, rc.Burst = 500, 1000
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	tidal, err := tidalclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	s := &budgetScene{kubeconfig: c.Kubeconfig, seen: map[budgetTarget][]int32{}, at: map[budgetTarget]time.Time{}}
	for range budgetNamespaces {
		ns := c.Namespace(t)
		s.nss = append(s.nss, ns)
		for i := range budgetBusy {
			s.busy = append(s.busy, budgetTarget{ns, fmt.Sprintf("busy-%03d", i)})
		}
		for i := range budgetSleepers {
			s.sleepers = append(s.sleepers, budgetTarget{ns, fmt.Sprintf("sleeper-%02d", i)})
		}
	}
	// The PodAutoscalers go when the test ends, before their namespaces
	// (which the API server empties in the background): the actuators of
	// the package's later tests watch every namespace, and a thousand
	// PodAutoscalers left to them would use up their budget.
	t.Cleanup(func() {
		for _, ns := range s.nss {
			pas := tidal.AutoscalingV1alpha1().PodAutoscalers(ns)
			if err := pas.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Errorf("delete the PodAutoscalers of %s: %v", ns, err)
			}
		}
	})
	// Every target a Deployment and a PodAutoscaler, created 16 at a time.
	all := append(slices.Clone(s.busy), s.sleepers...)
	work := make(chan budgetTarget)
	var created sync.WaitGroup
	errs := make(chan error, len(all))
	for range 16 {
		created.Go(func() {
			for tg := range work {
				replicas := int32(3)
				if strings.HasPrefix(tg.name, "sleeper") {
					replicas = 0
				}
				if _, err := kube.AppsV1().Deployments(tg.ns).Create(ctx, cluster.Deployment(tg.name, nil, replicas), metav1.CreateOptions{}); err != nil {
					errs <- err
					continue
				}
				_, err := tidal.AutoscalingV1alpha1().PodAutoscalers(tg.ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
					ObjectMeta: metav1.ObjectMeta{Name: tg.name},
					Spec: autoscalingv1alpha1.PodAutoscalerSpec{
						ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: tg.name},
					},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for _, tg := range all {
		work <- tg
	}
	close(work)
	created.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// An actuator with the default budget reconciles every PodAutoscaler
	// once (status, Metric), so the one under test starts from a settled
	// state; then it stops.
	s.namespaces = "--namespaces=" + strings.Join(s.nss, ",")
	_, stop := runActuator(t, c.Kubeconfig, testkit.FreeAddr(t), testkit.FreeAddr(t), s.namespaces)
	testkit.Eventually(t, 3*time.Minute, "every PodAutoscaler reconciled once", func() bool {
		n := 0
		for _, ns := range s.nss {
			l, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range l.Items {
				if l.Items[i].Status.ObservedGeneration > 0 {
					n++
				}
			}
		}
		return n == len(all)
	})
	stop()

	// Every spec.replicas each Deployment is written to, from now on.
	wctx, cancelWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	for _, ns := range s.nss {
		l, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The watches of the namespaces before this one already write seen.
		s.mu.Lock()
		for i := range l.Items {
			d := &l.Items[i]
			s.seen[budgetTarget{d.Namespace, d.Name}] = []int32{*d.Spec.Replicas}
		}
		s.mu.Unlock()
		w, err := kube.AppsV1().Deployments(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		watching.Go(func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				d, ok := ev.Object.(*appsv1.Deployment)
				if !ok || ev.Type != watch.Modified {
					continue
				}
				tg := budgetTarget{d.Namespace, d.Name}
				s.mu.Lock()
				if r := s.seen[tg]; len(r) == 0 || r[len(r)-1] != *d.Spec.Replicas {
					s.seen[tg] = append(r, *d.Spec.Replicas)
					s.at[tg] = time.Now()
				}
				s.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { cancelWatch(); watching.Wait() })
	return s
}

// replicas returns the values tg's spec.replicas took since the scene
// settled, the first being the settled one, and when the last was seen.
func (s *budgetScene) replicas(tg budgetTarget) ([]int32, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen[tg]), s.at[tg]
}

// allAt is a condition: every one of tgs' spec.replicas last seen at n.
func (s *budgetScene) allAt(tgs []budgetTarget, n int32) func() bool {
	return func() bool {
		for _, tg := range tgs {
			if r, _ := s.replicas(tg); r[len(r)-1] != n {
				return false
			}
		}
		return true
	}
}

// TestWriteBudget: with the actuator's --kube-qps far below the rate of
// changes asked, every wake from zero is applied within a second while the
// scale-downs asked before it wait, and a newer decision for a target whose
// older one still waits replaces it: the older value is never written.
func TestWriteBudget(t *testing.T) {
	sc := newBudgetScene(t)
	ctx := context.Background()
	busy, sleepers := sc.busy, sc.sleepers
	type target = budgetTarget

	httpAddr := testkit.FreeAddr(t)
	client, _ := runActuator(t, sc.kubeconfig, testkit.FreeAddr(t), httpAddr, sc.namespaces,
		fmt.Sprintf("--kube-qps=%d", budgetQPS), fmt.Sprintf("--kube-burst=%d", budgetQPS))
	type result struct {
		resp *actuatorv1.ScaleResponse
		err  error
		took time.Duration
	}
	scale := func(tg target, replicas int32, seq uint64, reason string) result {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		began := time.Now()
		resp, err := client.Scale(cctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: tg.ns, Name: tg.name},
			DesiredReplicas: replicas, DecisionSequence: seq, Reason: reason})
		return result{resp, err, time.Since(began)}
	}

	// Every busy target is asked down to 2 at once: about 2,900 requests
	// against a budget of 50 a second.
	seq1 := uint64(time.Now().UnixMilli())
	var downs, wakeCalls, seconds sync.WaitGroup
	var downsApplied atomic.Int64
	first := make([]result, len(busy))
	for i, tg := range busy {
		downs.Go(func() {
			first[i] = scale(tg, 2, seq1, "down to 2")
			if r := first[i]; r.err == nil && r.resp.GetChanged() {
				downsApplied.Add(1)
			}
		})
	}
	// Once they wait for the budget (not for the processor, which a flood
	// of 960 calls in one instant keeps busy for a second or two), the
	// sleepers wake one by one, five a second (a ticker paces the load).
	testkit.Eventually(t, time.Minute, "the scale-downs waiting for the budget", func() bool {
		return int(actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_waiting{class="down"}`)) >= len(busy)*3/4
	})
	wakes := make([]result, len(sleepers))
	began := time.Now()
	pace := time.NewTicker(wakeEvery)
	for i, tg := range sleepers {
		if i > 0 {
			<-pace.C
		}
		wakeCalls.Go(func() { wakes[i] = scale(tg, 1, uint64(time.Now().UnixMilli()), "wake") })
	}
	pace.Stop()
	wakeCalls.Wait()
	downsBefore := int(downsApplied.Load())

	// What tidal decides is how long a wake waits for the budget: every
	// wake's requests, by the actuator's own histogram, within a second
	// (the bucket at 1.024 s). From call to applied it adds the API
	// server's two writes, which a loaded machine stretches: logged.
	wakeWaits := actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_wait_seconds_count{class="wake"}`)
	withinSecond := actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_wait_seconds_bucket{class="wake",le="1.024"}`)
	within32ms := actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_wait_seconds_bucket{class="wake",le="0.032"}`)
	if wakeWaits < float64(2*len(sleepers)) || withinSecond != wakeWaits {
		t.Errorf("wakes' requests: %g, %g of them waited within 1.024s for the budget; want at least %d (a status write and a scale patch each), all within",
			wakeWaits, withinSecond, 2*len(sleepers))
	}
	var took []time.Duration
	for i, r := range wakes {
		if r.err != nil || !r.resp.GetChanged() || r.resp.GetAppliedReplicas() != 1 {
			t.Errorf("wake %v: %v, %v; want 1, changed", sleepers[i], r.resp, r.err)
			continue
		}
		took = append(took, r.took)
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d wakes from zero at %s each, beside %d scale-downs asked at once, --kube-qps %d: %g of the wakes' %g requests waited at most 32 ms for the budget, all within %s; from call to applied p50 %s, max %s; %d of the scale-downs applied meanwhile",
			len(took), wakeEvery, len(busy), budgetQPS, within32ms, wakeWaits, time.Duration(1.024*float64(time.Second)),
			took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), downsBefore)
	}
	if downsBefore > len(busy)/2 {
		t.Errorf("%d of %d scale-downs applied before the last wake: they did not wait", downsBefore, len(busy))
	}

	// A newer decision for every busy target: down to 1. Those whose first
	// decision still waits are replaced, and 2 is never written to them.
	seq2 := seq1 + 1000
	second := make([]result, len(busy))
	for i, tg := range busy {
		seconds.Go(func() { second[i] = scale(tg, 1, seq2, "down to 1") })
	}
	seconds.Wait()
	downs.Wait()
	drained := time.Since(began)
	superseded := 0
	for i, tg := range busy {
		f, s := first[i], second[i]
		if s.err != nil || s.resp.GetStale() || s.resp.GetAppliedReplicas() != 1 {
			t.Errorf("%v: second decision: %v, %v; want applied 1", tg, s.resp, s.err)
		}
		switch {
		case f.err != nil:
			t.Errorf("%v: first decision: %v", tg, f.err)
		case f.resp.GetStale():
			superseded++
			if f.resp.GetLastAppliedSequence() != seq2 {
				t.Errorf("%v: first decision superseded by %d, want %d", tg, f.resp.GetLastAppliedSequence(), seq2)
			}
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%v's write seen", tg), func() bool {
				r, _ := sc.replicas(tg)
				return r[len(r)-1] == 1
			})
			if got, _ := sc.replicas(tg); !slices.Equal(got, []int32{3, 1}) {
				t.Errorf("%v: superseded at 2, yet spec.replicas went %v; want straight to 1", tg, got)
			}
		case f.resp.GetAppliedReplicas() != 2:
			t.Errorf("%v: first decision: %v; want applied 2 or stale", tg, f.resp)
		}
	}
	t.Logf("then a newer decision (down to 1) for each of the %d busy targets: %d replaced the older one still waiting (never written), all applied %s after the first wake",
		len(busy), superseded, drained.Round(time.Second))
	if superseded < len(busy)/2 {
		t.Errorf("only %d of %d waiting decisions were replaced by the newer one", superseded, len(busy))
	}
}

// actuatorMetric reads one series of the actuator's /metrics, named as the
// text exposition writes it.
func actuatorMetric(t *testing.T, httpAddr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %s: %v", series, v, err)
			}
			return n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}
