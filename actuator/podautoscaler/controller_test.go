package podautoscaler

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	"github.com/tidalscale/tidal/kubecache"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// harness runs a Controller against the shared test cluster with a fake
// clock, in a namespace of its own.
type harness struct {
	t     *testing.T
	c     *cluster.Cluster
	ns    string
	clock *clocktesting.FakePassiveClock
	tidal tidalclient.Interface
	ctrl  *Controller
	// stop stops the Controller and its informers, as a crash would; the
	// test's cleanup calls it too.
	stop func()
}

func newHarness(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	c := cluster.Shared(t)
	return startHarness(t, c, c.Namespace(t), harnessOpts{mutate: mutate})
}

// replica starts a second, independent Controller (its own informers and
// caches) on the same namespace, as a second actuator replica would run.
func (h *harness) replica() *harness {
	h.t.Helper()
	return startHarness(h.t, h.c, h.ns, harnessOpts{})
}

// harnessOpts adjust a harness's Controller.
type harnessOpts struct {
	mutate func(*Config)
	// owner, when set, shares PodAutoscalers with other replicas.
	owner controller.OwnerFunc
	// wrap, when set, wraps the transport of the Controller's clients.
	wrap func(http.RoundTripper) http.RoundTripper
}

func startHarness(t *testing.T, c *cluster.Cluster, ns string, opts harnessOpts) *harness {
	t.Helper()
	rc := c.Config()
	if opts.wrap != nil {
		rc.Wrap(opts.wrap)
	}
	mutate, owner := opts.mutate, opts.owner
	tidal, err := tidalclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	live, err := scale.NewKube(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Autoscaler: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), Workers: 2, TargetRetry: time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	// Its informers see its namespace alone: the shared cluster holds
	// other tests' PodAutoscalers, whose writes would count as its own.
	// They drop managed fields, as the actuator's do.
	tidalInf := tidalinformers.NewSharedInformerFactoryWithOptions(tidal, 0, tidalinformers.WithNamespace(ns), tidalinformers.WithTransform(kubecache.DropManagedFields))
	kubeInf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns), informers.WithTransform(kubecache.DropManagedFields))
	scaler, err := scale.NewCached(live, kubeInf.Apps().V1().Deployments())
	if err != nil {
		t.Fatal(err)
	}
	recorder, broadcaster := NewEventRecorder(c.Client)
	clk := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	ctrl, err := newController(cfg, zap.NewNop(), clk, tidal, tidalInf, kubeInf, scaler, recorder)
	if err != nil {
		t.Fatal(err)
	}
	if owner != nil {
		ctrl.SetOwnership(owner)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tidalInf.StartWithContext(ctx)
	kubeInf.Start(ctx.Done())
	go func() { _ = ctrl.Run(ctx); close(done) }()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
		tidalInf.Shutdown()
		kubeInf.Shutdown()
		broadcaster.Shutdown()
	})
	t.Cleanup(stop)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return &harness{t: t, c: c, ns: ns, clock: clk, tidal: tidal, ctrl: ctrl, stop: stop}
}

func (h *harness) deployment(name string, replicas int32) {
	h.t.Helper()
	d := cluster.Deployment(name, nil, replicas)
	if _, err := h.c.Client.AppsV1().Deployments(h.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) podAutoscaler(name, target string, annotations map[string]string) *autoscalingv1alpha1.PodAutoscaler {
	h.t.Helper()
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{"team": "a"}},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			Strategy:       autoscalingv1alpha1.StrategyKPA,
		},
	}
	pa, err := h.tidal.AutoscalingV1alpha1().PodAutoscalers(h.ns).Create(context.Background(), pa, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	// Scale finds PodAutoscalers through the cache.
	h.eventually("podautoscaler in cache", func() bool {
		got, _ := h.ctrl.podAutoscalerFor(scale.Target{Namespace: h.ns, Name: target, APIVersion: "apps/v1", Kind: "Deployment"})
		return got != nil
	})
	return pa
}

// reconciledWeb makes the Deployment and PodAutoscaler "web" and waits
// for the first reconcile and for the Deployment in the cache.
func (h *harness) reconciledWeb() {
	h.t.Helper()
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", nil)
	h.eventually("first reconcile", func() bool { return h.get("web").Status.ActualScale != nil })
	h.eventually("deployment in cache", func() bool {
		s, err := h.ctrl.scaler.GetScale(context.Background(), scale.Target{Namespace: h.ns, Name: "web"})
		return err == nil && s.Selector != ""
	})
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	testkit.Eventually(h.t, 20*time.Second, what, cond)
}

func (h *harness) scale(target string, seq uint64, desired int32, reason string) scale.Result {
	h.t.Helper()
	res, err := h.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{
		Target: scale.Target{Namespace: h.ns, Name: target}, Desired: desired, Sequence: seq, Reason: reason,
	}})
	if err != nil {
		h.t.Fatalf("Scale(%s, seq %d, %d): %v", target, seq, desired, err)
	}
	return res
}

// reconcile runs one reconcile of the PodAutoscaler now, from the API's
// copy, as a requeue would.
func (h *harness) reconcile(name string) Outcome {
	h.t.Helper()
	unlock := h.ctrl.lock(cache.ObjectName{Namespace: h.ns, Name: name})
	defer unlock()
	pa := h.get(name)
	out, err := h.ctrl.reconcile(context.Background(), pa, nil, false)
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
	return out
}

// update changes the PodAutoscaler, retrying on conflicts with the
// controller's own writes.
func (h *harness) update(name string, change func(*autoscalingv1alpha1.PodAutoscaler)) {
	h.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pa := h.get(name)
		change(pa)
		_, err := h.tidal.AutoscalingV1alpha1().PodAutoscalers(h.ns).Update(context.Background(), pa, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) get(name string) *autoscalingv1alpha1.PodAutoscaler {
	h.t.Helper()
	pa, err := h.tidal.AutoscalingV1alpha1().PodAutoscalers(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pa
}

func (h *harness) replicas(name string) int32 {
	h.t.Helper()
	d, err := h.c.Client.AppsV1().Deployments(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return *d.Spec.Replicas
}

func (h *harness) readyPods(name string, n int) {
	h.t.Helper()
	h.eventually("ready pods", func() bool {
		got, _ := pods.CountReady(h.ctrl.podIndexer, h.ns, mustSelector("app="+name))
		return int(got) == n
	})
}

// events returns the messages of the PodAutoscaler's Events with reason.
func (h *harness) events(name, reason string) []string {
	list, err := h.c.Client.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out
}

func (h *harness) waitEvent(name, reason, message string) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return slices.Contains(h.events(name, reason), message), nil })
	if err != nil {
		h.t.Fatalf("no %s Event %q on %s; have %q", reason, message, name, h.events(name, reason))
	}
}

func condition(pa *autoscalingv1alpha1.PodAutoscaler, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(pa.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func TestScaleUpDownAndToZero(t *testing.T) {
	h := newHarness(t, nil)
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", map[string]string{kpaconfig.AnnotationWindow: "6s"})
	h.readyPods("web", 1)

	// The workers create the Metric and write status.
	h.eventually("metric", func() bool {
		m, err := h.tidal.AutoscalingV1alpha1().Metrics(h.ns).Get(context.Background(), "web", metav1.GetOptions{})
		return err == nil && m.Spec.ScrapeTarget == "web" && m.Spec.StableWindow.Duration == 6*time.Second &&
			m.Spec.Selector != nil && m.Spec.Selector.MatchLabels["app"] == "web" && m.Labels["team"] == "a"
	})

	res := h.scale("web", 1000, 5, "panic: observed concurrency 84 over target 7")
	if want := (scale.Result{Applied: 5, Previous: 1, Changed: true, LastSequence: 1000}); res != want {
		t.Errorf("scale up = %+v, want %+v", res, want)
	}
	if got := h.replicas("web"); got != 5 {
		t.Errorf("replicas = %d, want 5", got)
	}
	h.waitEvent("web", EventScaled, "panic: 1 → 5, observed concurrency 84 over target 7")
	pa := h.get("web")
	if pa.Status.DesiredScale == nil || *pa.Status.DesiredScale != 5 {
		t.Errorf("status.desiredScale = %v, want 5", pa.Status.DesiredScale)
	}
	if d := pa.Status.LastDecision; d == nil || d.Sequence != 1000 || d.DesiredScale != 5 || !strings.HasPrefix(d.Reason, "panic:") {
		t.Errorf("status.lastDecision = %+v, want sequence 1000, desired 5, the reason", d)
	}
	if pa.Status.LastScaleTime == nil {
		t.Error("status.lastScaleTime not set after a scale")
	}
	h.readyPods("web", 5)

	res = h.scale("web", 2000, 2, "stable: observed concurrency 12 over target 7")
	if res.Applied != 2 || !res.Changed || h.replicas("web") != 2 {
		t.Errorf("scale down = %+v, replicas %d; want 2", res, h.replicas("web"))
	}
	h.waitEvent("web", EventScaled, "stable: 5 → 2, observed concurrency 12 over target 7")

	// A late, older decision is refused and changes nothing.
	res = h.scale("web", 1500, 9, "panic: late")
	if !res.Stale || res.Applied != 2 || res.LastSequence != 2000 || h.replicas("web") != 2 {
		t.Errorf("stale decision = %+v, replicas %d; want refused at 2, last 2000", res, h.replicas("web"))
	}
	h.waitEvent("web", EventStaleDecision, "refused decision 1500 (9 replicas): older than decision 2000 already applied")
	// The same decision again is a no-op, answered as recorded once the
	// status in the cache holds it (so the decider stops sending it).
	if res = h.scale("web", 2000, 2, "stable: again"); res.Changed || res.Stale || res.Applied != 2 {
		t.Errorf("repeated decision = %+v, want unchanged 2", res)
	}
	h.eventually("the repeated decision answered as recorded", func() bool { return h.scale("web", 2000, 2, "stable: again").Recorded })
	h.readyPods("web", 2)

	// Scale to zero (spec §6.4): the decider says 0; the PA has been Active
	// for less than the 6 s window, so one pod stays.
	h.reconcile("web") // observe the ready pods: Active
	pa = h.get("web")
	if c := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionActive); c.Status != metav1.ConditionTrue {
		t.Fatalf("Active = %+v, want True", c)
	}
	h.clock.SetTime(h.clock.Now().Add(2 * time.Second))
	res = h.scale("web", 3000, 0, "stable: no traffic for 6s")
	if res.Applied != 1 || h.replicas("web") != 1 {
		t.Errorf("desired 0 while active for 2s = %+v, replicas %d; want held at 1", res, h.replicas("web"))
	}
	h.waitEvent("web", EventScaled, "stable: 2 → 1, no traffic for 6s (decider wanted 0; the last pod stays until the PodAutoscaler has been active for a stable window)")
	// After the window the PA goes Inactive, and the last pod stays for
	// the grace period.
	h.clock.SetTime(h.clock.Now().Add(6 * time.Second))
	out := h.reconcile("web")
	pa = h.get("web")
	if c := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionActive); c.Status != metav1.ConditionFalse || c.Reason != "NoTraffic" {
		t.Errorf("Active after the window = %+v, want False NoTraffic", c)
	}
	if out.Patched || h.replicas("web") != 1 {
		t.Errorf("went to zero at once (%+v); want the grace period first", out)
	}
	// Nothing else may come (no decision changes, no pod event): the pass
	// that turned it inactive asks for the next one, which starts the grace
	// period's own requeue.
	if out.Requeue <= 0 || out.Requeue > time.Second {
		t.Errorf("the reconcile that turned the PodAutoscaler inactive asked for its next pass in %v; want at once", out.Requeue)
	}
	out = h.reconcile("web")
	if out.Patched || out.Requeue <= 0 || out.Requeue > 30*time.Second {
		t.Errorf("the pass after it: %+v; want no change and the grace period's requeue", out)
	}
	h.clock.SetTime(h.clock.Now().Add(10 * time.Second))
	out = h.reconcile("web")
	if out.Patched || h.replicas("web") != 1 || out.Requeue <= 0 || out.Requeue > 30*time.Second {
		t.Errorf("10s into the grace period: %+v, replicas %d; want no change and a requeue", out, h.replicas("web"))
	}
	h.clock.SetTime(h.clock.Now().Add(21 * time.Second))
	// (A worker woken by a pod event may get there first.)
	out = h.reconcile("web")
	if h.replicas("web") != 0 {
		t.Errorf("after the grace period: %+v, replicas %d; want 0", out, h.replicas("web"))
	}
	h.waitEvent("web", EventScaled, "stable: 1 → 0, no traffic for 6s")
	pa = h.get("web")
	if pa.Status.DesiredScale == nil || *pa.Status.DesiredScale != 0 {
		t.Errorf("status.desiredScale = %v, want 0", pa.Status.DesiredScale)
	}
	h.readyPods("web", 0)
	h.reconcile("web")
	pa = h.get("web")
	if pa.Status.ActualScale == nil || *pa.Status.ActualScale != 0 {
		t.Errorf("status.actualScale = %v, want 0", pa.Status.ActualScale)
	}
	if c := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", c)
	}
	if c := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized); c.Status != metav1.ConditionTrue {
		t.Errorf("ScaleTargetInitialized = %+v, want True", c)
	}

	// And back from zero.
	res = h.scale("web", 4000, 3, "panic: observed concurrency 20 over target 7")
	if res.Applied != 3 || h.replicas("web") != 3 {
		t.Errorf("scale from zero = %+v, replicas %d; want 3", res, h.replicas("web"))
	}
	pa = h.get("web")
	if c := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionActive); c.Status != metav1.ConditionUnknown || c.Reason != "Queued" {
		t.Errorf("Active while activating = %+v, want Unknown Queued", c)
	}
}

func TestBoundsAndBadInput(t *testing.T) {
	h := newHarness(t, nil)
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", map[string]string{kpaconfig.AnnotationMinScale: "2", kpaconfig.AnnotationMaxScale: "6"})

	// Before any decision, the activating PodAutoscaler's min-scale applies.
	h.eventually("min-scale applied", func() bool { return h.replicas("web") == 2 })
	h.waitEvent("web", EventScaled, "1 → 2 (no decision yet; min-scale 2)")
	if res := h.scale("web", 10, 1, "stable: quiet"); res.Applied != 2 || res.Changed || h.replicas("web") != 2 {
		t.Errorf("desired 1 under min-scale 2 = %+v, replicas %d; want 2", res, h.replicas("web"))
	}
	if res := h.scale("web", 11, 5, "stable: busy"); res.Applied != 5 || h.replicas("web") != 5 {
		t.Errorf("desired 5 = %+v, replicas %d; want 5", res, h.replicas("web"))
	}
	if res := h.scale("web", 12, 0, "stable: idle"); res.Applied != 2 || h.replicas("web") != 2 {
		t.Errorf("desired 0 with min-scale 2 = %+v, replicas %d; want 2", res, h.replicas("web"))
	}
	h.waitEvent("web", EventScaled, "stable: 5 → 2, idle (decider wanted 0; min-scale 2)")

	ctx := context.Background()
	_, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "web"}, Desired: 7, Sequence: 20}})
	if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "max-scale 6") {
		t.Errorf("desired above max-scale: err = %v, want ErrOutOfRange naming max-scale 6", err)
	}
	if h.replicas("web") != 2 {
		t.Errorf("replicas = %d after a refused decision, want 2", h.replicas("web"))
	}
	_, err = h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "web"}, Desired: 3, Sequence: math.MaxInt64 + 1}})
	if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "decision_sequence") {
		t.Errorf("sequence above int64: err = %v, want ErrOutOfRange naming decision_sequence", err)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 12 {
		t.Errorf("status.lastDecision = %+v after a refused decision, want sequence 12", d)
	}

	// A target nobody has, with no PodAutoscaler: NOT_FOUND.
	_, err = h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "ghost"}, Desired: 1, Sequence: 1}})
	if !errors.Is(err, scale.ErrNotFound) {
		t.Errorf("missing target: err = %v, want ErrNotFound", err)
	}
	// A target without /scale.
	_, err = h.ctrl.Scale(ctx, Request{Decision: scale.Decision{
		Target: scale.Target{Namespace: h.ns, Name: "cm", APIVersion: "v1", Kind: "ConfigMap"}, Desired: 1, Sequence: 1,
	}})
	if !errors.Is(err, scale.ErrNoScaleSubresource) {
		t.Errorf("target without /scale: err = %v, want ErrNoScaleSubresource", err)
	}

	// A PodAutoscaler whose target is missing says so in status and Events,
	// and Scale on it is NOT_FOUND.
	h.podAutoscaler("orphan", "missing", nil)
	h.eventually("TargetNotFound status", func() bool {
		c := condition(h.get("orphan"), autoscalingv1alpha1.PodAutoscalerConditionReady)
		return c.Status == metav1.ConditionFalse && c.Reason == ReasonTargetNotFound
	})
	h.waitEvent("orphan", EventTargetNotFound, "deployments.apps "+h.ns+"/missing: target not found")
	_, err = h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "missing"}, Desired: 1, Sequence: 1}})
	if !errors.Is(err, scale.ErrNotFound) {
		t.Errorf("Scale on a podautoscaler's missing target: err = %v, want ErrNotFound", err)
	}
	// Bad annotations: InvalidSpec, naming the key and value.
	h.deployment("bad", 1)
	h.podAutoscaler("bad", "bad", map[string]string{kpaconfig.AnnotationMinScale: "-3"})
	h.eventually("InvalidSpec status", func() bool {
		c := condition(h.get("bad"), autoscalingv1alpha1.PodAutoscalerConditionReady)
		return c.Status == metav1.ConditionFalse && c.Reason == ReasonInvalidSpec && strings.Contains(c.Message, "min-scale")
	})
	_, err = h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "bad"}, Desired: 3, Sequence: 1}})
	if !errors.Is(err, ErrInvalidPodAutoscaler) || !strings.Contains(err.Error(), "min-scale") {
		t.Errorf("Scale through an invalid podautoscaler: err = %v, want ErrInvalidPodAutoscaler naming min-scale", err)
	}
	if h.replicas("bad") != 1 {
		t.Errorf("invalid PodAutoscaler changed its target: replicas %d", h.replicas("bad"))
	}
}

func TestDryRunAndPause(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()

	// Per request: reported, nothing changed, nothing recorded.
	h.deployment("req", 1)
	h.podAutoscaler("req", "req", nil)
	res, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "req"}, Desired: 4, Sequence: 5, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 4 || res.Changed || h.replicas("req") != 1 {
		t.Errorf("dry-run request = %+v, replicas %d; want would-be 4, unchanged 1", res, h.replicas("req"))
	}
	if d := h.get("req").Status.LastDecision; d != nil {
		t.Errorf("a dry-run request recorded its decision: status.lastDecision = %+v", d)
	}

	// Per PodAutoscaler: recorded and reported, target unchanged.
	h.deployment("dry", 1)
	h.podAutoscaler("dry", "dry", map[string]string{AnnotationDryRun: "true"})
	res = h.scale("dry", 5, 4, "panic: burst")
	if res.Applied != 4 || res.Changed || h.replicas("dry") != 1 {
		t.Errorf("dry-run podautoscaler = %+v, replicas %d; want would-be 4, unchanged 1", res, h.replicas("dry"))
	}
	h.waitEvent("dry", EventDryRun, "dry run, not applied: panic: 1 → 4, burst")
	if c := condition(h.get("dry"), autoscalingv1alpha1.PodAutoscalerConditionReady); c.Reason != ReasonDryRun || !strings.Contains(c.Message, "would scale 1 → 4") {
		t.Errorf("Ready = %+v, want DryRun saying it would scale 1 → 4", c)
	}

	// Paused: frozen at its current scale.
	h.deployment("paused", 3)
	h.podAutoscaler("paused", "paused", map[string]string{AnnotationPaused: "true"})
	res = h.scale("paused", 5, 8, "panic: burst")
	if res.Applied != 3 || res.Changed || h.replicas("paused") != 3 {
		t.Errorf("paused = %+v, replicas %d; want held at 3", res, h.replicas("paused"))
	}
	h.waitEvent("paused", EventPaused, "paused at 3, not applied: panic: 3 → 8, burst")
	// Unpausing applies the latest recorded decision.
	h.update("paused", func(pa *autoscalingv1alpha1.PodAutoscaler) { delete(pa.Annotations, AnnotationPaused) })
	h.eventually("unpaused target scaled", func() bool { return h.replicas("paused") == 8 })
}

func TestMetricFollowsPodAutoscaler(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", map[string]string{kpaconfig.AnnotationTargetBurstCapacity: "-1"})
	getMetric := func() (*autoscalingv1alpha1.Metric, error) {
		return h.tidal.AutoscalingV1alpha1().Metrics(h.ns).Get(ctx, "web", metav1.GetOptions{})
	}
	h.eventually("unscraped metric", func() bool {
		m, err := getMetric()
		return err == nil && m.Spec.ScrapeTarget == "" && m.Spec.StableWindow.Duration == 60*time.Second &&
			m.Spec.PanicWindow.Duration == 6*time.Second
	})
	h.update("web", func(pa *autoscalingv1alpha1.PodAutoscaler) {
		pa.Annotations[kpaconfig.AnnotationWindow] = "20s"
		pa.Annotations[kpaconfig.AnnotationScaleDownDelay] = "30s"
		delete(pa.Annotations, kpaconfig.AnnotationTargetBurstCapacity)
	})
	// The resolved scale-down delay tells the collector how much history
	// the decider needs.
	h.eventually("updated metric", func() bool {
		m, err := getMetric()
		return err == nil && m.Spec.ScrapeTarget == "web" && m.Spec.StableWindow.Duration == 20*time.Second &&
			m.Spec.PanicWindow.Duration == 2*time.Second && m.Spec.ScaleDownDelay != nil && m.Spec.ScaleDownDelay.Duration == 30*time.Second
	})
	// The Metric is restored if someone deletes it.
	if err := h.tidal.AutoscalingV1alpha1().Metrics(h.ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("recreated metric", func() bool { _, err := getMetric(); return err == nil })
	// Deleting the PodAutoscaler deletes its Metric (owner reference).
	if err := h.tidal.AutoscalingV1alpha1().PodAutoscalers(h.ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller deletes it without waiting for the garbage collector.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := getMetric()
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("metric not deleted with its podautoscaler: %v", err)
	}
}

func mustSelector(s string) labels.Selector {
	sel, err := labels.Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

func TestStaleCacheNeverUndoesNewerDecision(t *testing.T) {
	h := newHarness(t, nil)
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", nil)
	h.scale("web", 100, 5, "panic: first")
	old := h.get("web") // a copy that knows decision 100 only
	h.scale("web", 200, 2, "stable: second")
	if got := h.replicas("web"); got != 2 {
		t.Fatalf("replicas = %d, want 2", got)
	}
	// A worker holding the old copy (an informer that lags) must not
	// re-apply decision 100: its status write, made first, conflicts.
	unlock := h.ctrl.lock(cache.ObjectName{Namespace: h.ns, Name: "web"})
	out, err := h.ctrl.reconcile(context.Background(), old, nil, false)
	unlock()
	if out.Patched || !apierrors.IsConflict(err) {
		t.Errorf("reconcile of a stale copy: patched %v, err = %v; want no patch and a conflict", out.Patched, err)
	}
	if got := h.replicas("web"); got != 2 {
		t.Errorf("replicas = %d after a stale reconcile, want 2", got)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 200 {
		t.Errorf("status.lastDecision = %+v after a stale reconcile, want sequence 200", d)
	}
}

// TestStaleStatusWriteNeverUndoesNewerDecision: a reconcile from a lagging
// copy that has nothing to scale still writes status; that write must not
// put the copy's older status.lastDecision back.
func TestStaleStatusWriteNeverUndoesNewerDecision(t *testing.T) {
	h := newHarness(t, nil)
	h.deployment("web", 1)
	h.podAutoscaler("web", "web", nil)
	h.scale("web", 100, 4, "panic: first")
	old := h.get("web") // a copy that knows decision 100 only
	// Same scale, newer decision: the target is not patched again.
	h.scale("web", 200, 4, "stable: second")
	if got := h.replicas("web"); got != 4 {
		t.Fatalf("replicas = %d, want 4", got)
	}
	// Make the old copy's status differ from what reconcile computes, so
	// it writes.
	old.Status.ActualScale = nil
	unlock := h.ctrl.lock(cache.ObjectName{Namespace: h.ns, Name: "web"})
	out, err := h.ctrl.reconcile(context.Background(), old, nil, false)
	unlock()
	if out.Patched || !apierrors.IsConflict(err) {
		t.Errorf("reconcile of a stale copy: patched %v, err = %v; want no patch and a conflict", out.Patched, err)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 200 || d.Reason != "stable: second" {
		t.Errorf("status.lastDecision = %+v after a stale status write, want sequence 200", d)
	}
}

func TestReplicasShareTheSequence(t *testing.T) {
	a := newHarness(t, nil)
	b := a.replica()
	a.deployment("web", 1)
	a.podAutoscaler("web", "web", nil)
	b.eventually("podautoscaler in the second replica's cache", func() bool {
		got, _ := b.ctrl.podAutoscalerFor(scale.Target{Namespace: b.ns, Name: "web", APIVersion: "apps/v1", Kind: "Deployment"})
		return got != nil
	})
	if res := a.scale("web", 2000, 6, "panic: newer"); res.Applied != 6 {
		t.Fatalf("replica A: %+v, want 6", res)
	}
	// The older decision reaches the other replica late: refused there too.
	res := b.scale("web", 1500, 2, "stable: older")
	if !res.Stale || res.LastSequence != 2000 || a.replicas("web") != 6 {
		t.Errorf("replica B with an older decision = %+v, replicas %d; want refused, 6 kept", res, a.replicas("web"))
	}
	if res := b.scale("web", 2500, 3, "stable: newest"); res.Stale || res.Applied != 3 || a.replicas("web") != 3 {
		t.Errorf("replica B with a newer decision = %+v, replicas %d; want 3", res, a.replicas("web"))
	}
	if res := a.scale("web", 2400, 8, "panic: late"); !res.Stale || a.replicas("web") != 3 {
		t.Errorf("replica A with a late decision = %+v, replicas %d; want refused, 3 kept", res, a.replicas("web"))
	}
	if d := a.get("web").Status.LastDecision; d == nil || d.Sequence != 2500 || d.DesiredScale != 3 {
		t.Errorf("status.lastDecision = %+v, want sequence 2500, desired 3", d)
	}
}

// TestOwnershipSplitsPodAutoscalers: with replicas sharing PodAutoscalers,
// each reconciles only its own, and a decision for another's names the owner.
func TestOwnershipSplitsPodAutoscalers(t *testing.T) {
	owner := func(self string) controller.OwnerFunc {
		return func(key string) (string, bool) {
			o := "actuator-a:9003"
			if strings.HasSuffix(key, "-b") {
				o = "actuator-b:9003"
			}
			return o, o == self
		}
	}
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	a := startHarness(t, c, ns, harnessOpts{owner: owner("actuator-a:9003")})
	b := startHarness(t, c, ns, harnessOpts{owner: owner("actuator-b:9003")})
	for _, name := range []string{"web-a", "web-b"} {
		a.deployment(name, 1)
		a.podAutoscaler(name, name, nil)
		b.eventually("podautoscaler in b's cache", func() bool {
			got, _ := b.ctrl.podAutoscalerFor(scale.Target{Namespace: ns, Name: name, APIVersion: "apps/v1", Kind: "Deployment"})
			return got != nil
		})
	}
	// Each owner reconciles its own: the Metric exists and status is written.
	for _, name := range []string{"web-a", "web-b"} {
		a.eventually("metric of "+name, func() bool {
			_, err := a.tidal.AutoscalingV1alpha1().Metrics(ns).Get(context.Background(), name, metav1.GetOptions{})
			return err == nil
		})
	}
	if res := a.scale("web-a", 100, 3, "panic: a"); res.Applied != 3 || a.replicas("web-a") != 3 {
		t.Errorf("owner's Scale = %+v, replicas %d; want 3", res, a.replicas("web-a"))
	}
	_, err := b.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{
		Target: scale.Target{Namespace: ns, Name: "web-a"}, Desired: 5, Sequence: 200, Reason: "panic: wrong replica",
	}})
	var no *NotOwnerError
	if !errors.As(err, &no) || no.Owner != "actuator-a:9003" {
		t.Errorf("Scale at a non-owner: err = %v, want a NotOwnerError naming actuator-a:9003", err)
	}
	if got := a.replicas("web-a"); got != 3 {
		t.Errorf("replicas = %d after a non-owner's Scale, want 3 (untouched)", got)
	}
	if res := b.scale("web-b", 100, 2, "panic: b"); res.Applied != 2 {
		t.Errorf("b's own Scale = %+v, want 2", res)
	}
}

// callTag marks the context of the calls a test makes, so the requests
// they send can be told from the controller's own.
type callTag struct{}

// requests counts the API requests made under a tagged context (or, with
// all, every write), by method and the last path segments ("PUT
// podautoscalers/status").
type requests struct {
	mu sync.Mutex
	n  map[string]int
	// seq is what n counts, in the order it was sent.
	seq []string
	// all counts every write, tagged or not.
	all bool
}

func (r *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Context().Value(callTag{}) != nil || r.all && req.Method != http.MethodGet {
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			// .../namespaces/NS/RESOURCE/NAME[/SUB]
			what := ""
			for i := range parts {
				if parts[i] == "namespaces" && i+2 < len(parts) {
					what = parts[i+2]
					if i+4 < len(parts) {
						what += "/" + parts[i+4]
					}
				}
			}
			r.mu.Lock()
			r.n[req.Method+" "+what]++
			r.seq = append(r.seq, req.Method+" "+what)
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (r *requests) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.n
	r.n, r.seq = map[string]int{}, nil
	return out
}

// takeOrder is take's requests in the order they were sent.
func (r *requests) takeOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.seq
	r.n, r.seq = map[string]int{}, nil
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestScaleWritesOnceAndReadsCaches: a decision that changes the target
// costs one status write and one scale patch and no read; the same
// decision again costs nothing.
func TestScaleWritesOnceAndReadsCaches(t *testing.T) {
	reqs := &requests{n: map[string]int{}}
	c := cluster.Shared(t)
	h := startHarness(t, c, c.Namespace(t), harnessOpts{wrap: reqs.wrap})
	h.reconciledWeb()
	ctx := context.WithValue(context.Background(), callTag{}, true)
	call := func(seq uint64, desired int32) scale.Result {
		t.Helper()
		res, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{
			Target: scale.Target{Namespace: h.ns, Name: "web"}, Desired: desired, Sequence: seq, Reason: "stable: test"}})
		if err != nil {
			t.Fatalf("Scale(%d, %d): %v", seq, desired, err)
		}
		return res
	}
	reqs.take()
	if res := call(1000, 4); !res.Changed || res.Applied != 4 {
		t.Fatalf("Scale to 4 = %+v, want changed to 4", res)
	}
	want := map[string]int{"PUT podautoscalers/status": 1, "PATCH deployments/scale": 1}
	if got := reqs.take(); !maps.Equal(got, want) {
		t.Errorf("requests of a changing decision = %v, want %v", got, want)
	}
	// Let the new pods turn ready and the controller record them: that
	// is a change of its own.
	h.readyPods("web", 4)
	h.eventually("actualScale 4", func() bool {
		pa, err := h.ctrl.current(cache.ObjectName{Namespace: h.ns, Name: "web"})
		return err == nil && pa.Status.ActualScale != nil && *pa.Status.ActualScale == 4
	})
	reqs.take()
	if res := call(1000, 4); res.Changed || res.Applied != 4 {
		t.Fatalf("the same decision again = %+v, want 4, unchanged", res)
	}
	if got := reqs.take(); len(got) != 0 {
		t.Errorf("requests of a repeated decision = %v, want none", got)
	}
	// A newer decision with the same count records the decision only.
	if res := call(2000, 4); res.Changed || res.LastSequence != 2000 {
		t.Fatalf("a newer decision, same count = %+v, want unchanged, sequence 2000", res)
	}
	want = map[string]int{"PUT podautoscalers/status": 1}
	if got := reqs.take(); !maps.Equal(got, want) {
		t.Errorf("requests of a newer decision with the same count = %v, want %v", got, want)
	}
}

// TestScaleToZeroAfterLastDecision: a decision of 0 that turns the
// PodAutoscaler inactive is the last event it gets (no traffic, no pod
// changes), so the passes its rules ask for (the next one, then the end of
// the grace period) must come from the Scale call itself: the target
// reaches zero once the grace period has passed, with no further event.
func TestScaleToZeroAfterLastDecision(t *testing.T) {
	queue := clocktesting.NewFakeClock(time.Now())
	c := cluster.Shared(t)
	// PodAutoscaler watch events arrive late, as on a busy API server, so
	// the echo of Scale's own status write is always known as its own and
	// wakes no worker.
	h := startHarness(t, c, c.Namespace(t), harnessOpts{
		mutate: func(c *Config) { c.queueClock = queue },
		wrap: func(rt http.RoundTripper) http.RoundTripper {
			return slowWatch{rt, "podautoscalers", 300 * time.Millisecond}
		},
	})
	h.deployment("idle", 1)
	h.podAutoscaler("idle", "idle", map[string]string{kpaconfig.AnnotationWindow: "6s"})
	h.readyPods("idle", 1)
	h.scale("idle", 1000, 1, "stable: one pod's worth")
	// The workers observe the ready pod: Active. (Not h.reconcile: the echo
	// of a status write not made by a worker would wake one later, an event
	// this test must not have.)
	h.eventually("Active", func() bool {
		return condition(h.get("idle"), autoscalingv1alpha1.PodAutoscalerConditionActive).Status == metav1.ConditionTrue
	})
	// Passes queued before the decision (the one after Active turned True)
	// run now, so that none is left to be woken by the steps below.
	queue.Step(time.Minute)
	time.Sleep(time.Second)

	// Active for longer than the window: this decision turns it inactive,
	// and the last pod stays for the grace period.
	h.clock.SetTime(h.clock.Now().Add(10 * time.Second))
	if res := h.scale("idle", 2000, 0, "stable: no traffic for 6s"); res.Applied != 1 {
		t.Fatalf("desired 0 = %+v; want the last pod kept for the grace period", res)
	}
	start := h.clock.Now()
	// Time passes, a second at a time, for both the rules' clock and the
	// queue's; nothing else happens.
	var zeroAt time.Duration
	for i := range 90 {
		time.Sleep(30 * time.Millisecond) // let a woken worker finish its pass
		if h.replicas("idle") == 0 {
			zeroAt = h.clock.Now().Sub(start)
			break
		}
		if i == 89 {
			t.Fatalf("still %d replicas %v after the decision of 0; want 0 after the grace period (%v)",
				h.replicas("idle"), h.clock.Now().Sub(start), kpaconfig.Default().ScaleToZeroGracePeriod)
		}
		h.clock.SetTime(h.clock.Now().Add(time.Second))
		queue.Step(time.Second)
	}
	if grace := kpaconfig.Default().ScaleToZeroGracePeriod; zeroAt < grace {
		t.Errorf("reached zero %v after the decision of 0; want no sooner than the grace period, %v", zeroAt, grace)
	}
}

// slowWatch delays every read of a watch of resource.
type slowWatch struct {
	http.RoundTripper
	resource string
	delay    time.Duration
}

func (s slowWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.RoundTripper.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") == "true" && strings.Contains(req.URL.Path, "/"+s.resource) {
		resp.Body = &slowBody{ReadCloser: resp.Body, delay: s.delay}
	}
	return resp, err
}

type slowBody struct {
	io.ReadCloser
	delay time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	time.Sleep(b.delay)
	return b.ReadCloser.Read(p)
}
