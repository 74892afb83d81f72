package podautoscaler

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/overlay"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	autoscalinglisters "github.com/tidalscale/tidal/apis/generated/listers/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

func revision(t *testing.T, ann map[string]string) kpaconfig.Revision {
	t.Helper()
	rev, err := kpaconfig.NewRevision(kpaconfig.Default(), kpaconfig.DefaultDeployment(), ann, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func TestScaleMessage(t *testing.T) {
	plain := revision(t, nil)
	bounded := revision(t, map[string]string{kpaconfig.AnnotationMinScale: "2", kpaconfig.AnnotationMaxScale: "8"})
	tests := []struct {
		name        string
		reason      string
		desired     int32
		hasDecision bool
		from, to    int32
		rev         *kpaconfig.Revision
		want        string
	}{
		{"mode prefix", "panic: observed concurrency 84 over target 7", 12, true, 5, 12, &plain,
			"panic: 5 → 12, observed concurrency 84 over target 7"},
		{"no mode", "observed lag 40", 3, true, 1, 3, &plain, "1 → 3, observed lag 40"},
		{"prefix with spaces is not a mode", "too many requests: 40", 3, true, 1, 3, &plain, "1 → 3, too many requests: 40"},
		{"no reason", "", 3, true, 1, 3, &plain, "1 → 3"},
		{"min-scale", "stable: idle", 0, true, 5, 2, &bounded, "stable: 5 → 2, idle (decider wanted 0; min-scale 2)"},
		{"last pod", "stable: idle", 0, true, 3, 1, &plain,
			"stable: 3 → 1, idle (decider wanted 0; the last pod stays until the PodAutoscaler has been active for a stable window)"},
		{"no decision, min-scale", "", 0, false, 0, 2, &bounded, "0 → 2 (no decision yet; min-scale 2)"},
		{"no decision, activation timeout", "", 0, false, 3, 0, &plain, "3 → 0 (no decision yet; activation timed out)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scaleMessage(tt.reason, tt.desired, tt.hasDecision, tt.from, tt.to, tt.rev); got != tt.want {
				t.Errorf("scaleMessage = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLastSequence(t *testing.T) {
	tests := []struct {
		name string
		dec  *autoscalingv1alpha1.PodAutoscalerDecision
		want uint64
	}{
		{"none", nil, 0},
		{"recorded", &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: 1700000000123, DesiredScale: 7}, 1700000000123},
		{"zero", &autoscalingv1alpha1.PodAutoscalerDecision{}, 0},
	}
	for _, tt := range tests {
		pa := &autoscalingv1alpha1.PodAutoscaler{Status: autoscalingv1alpha1.PodAutoscalerStatus{LastDecision: tt.dec}}
		if got := sequence(pa.Status.LastDecision); got != tt.want {
			t.Errorf("%s: lastSequence = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestTargetKey(t *testing.T) {
	tests := []struct {
		t    scale.Target
		want string
	}{
		{scale.Target{Namespace: "ns", Name: "web"}, "ns/web"},
		{scale.Target{Namespace: "ns", Name: "web", APIVersion: "apps/v1", Kind: "Deployment"}, "ns/web"},
		{scale.Target{Namespace: "ns", Name: "db", APIVersion: "apps/v1", Kind: "StatefulSet"}, "ns/StatefulSet.apps/db"},
		{scale.Target{Namespace: "ns", Name: "s", APIVersion: "test.tidal.dev/v1", Kind: "Scalable"}, "ns/Scalable.test.tidal.dev/s"},
	}
	for _, tt := range tests {
		if got, err := targetKey(tt.t); err != nil || got != tt.want {
			t.Errorf("targetKey(%+v) = %q, %v; want %q", tt.t, got, err, tt.want)
		}
	}
	if _, err := targetKey(scale.Target{Namespace: "ns", Name: "x", APIVersion: "a/b/c"}); err == nil {
		t.Error("malformed apiVersion: no error")
	}
}

func TestEventHandlersEnqueue(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := &Controller{selectors: pods.NewSelectors[cache.ObjectName]()}
	reconciled := make(chan cache.ObjectName, 16)
	c.Controller = controller.New(controller.Config{Name: "podautoscaler", RetryQPS: 10, RetryBurst: 10, Clock: clk}, zap.NewNop(),
		func(_ context.Context, name cache.ObjectName) (time.Duration, error) {
			reconciled <- name
			return 0, nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// next is the next name reconciled; a sentinel added behind a burst
	// proves nothing else was queued by it.
	next := func() cache.ObjectName {
		t.Helper()
		select {
		case n := <-reconciled:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("nothing reconciled")
			return cache.ObjectName{}
		}
	}
	sentinel := cache.ObjectName{Namespace: "z", Name: "sentinel"}

	web := cache.ObjectName{Namespace: "a", Name: "web"}
	other := cache.ObjectName{Namespace: "b", Name: "web"}
	c.selectors.Set(web, "a", labels.SelectorFromSet(labels.Set{"app": "web"}))
	c.selectors.Set(other, "b", labels.SelectorFromSet(labels.Set{"app": "web"}))

	// A pod maps to the PodAutoscalers in its namespace whose target
	// selects it, after podEventDelay, which gathers a burst of readiness
	// changes into one reconcile.
	for _, name := range []string{"p", "p2"} {
		c.enqueuePod(&pods.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Labels: map[string]string{"app": "web", "x": "y"}}})
	}
	c.enqueuePod(&pods.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "q", Labels: map[string]string{"app": "db"}}})
	c.Add(sentinel)
	if got := next(); got != sentinel {
		t.Fatalf("reconciled %v before podEventDelay, want nothing but the sentinel", got)
	}
	clk.Step(podEventDelay)
	if got := next(); got != web {
		t.Errorf("reconciled %v, want %v", got, web)
	}
	c.Add(sentinel)
	if got := next(); got != sentinel {
		t.Errorf("reconciled %v after the burst, want it merged into one", got)
	}

	// A Metric maps to its controlling PodAutoscaler; a tombstone too.
	enqueueOwner := c.EnqueueOwner(autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler"))
	pa := &autoscalingv1alpha1.PodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "api", UID: "u"}}
	m := &autoscalingv1alpha1.Metric{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "api",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pa, autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler"))}}}
	enqueueOwner(cache.DeletedFinalStateUnknown{Key: "b/api", Obj: m})
	if got := next(); got != (cache.ObjectName{Namespace: "b", Name: "api"}) {
		t.Errorf("metric enqueued %v, want b/api", got)
	}
	// Not controlled by a PodAutoscaler: nothing.
	enqueueOwner(&autoscalingv1alpha1.Metric{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "loose"}})
	c.Add(sentinel)
	if got := next(); got != sentinel {
		t.Errorf("reconciled %v after an unowned metric, want nothing", got)
	}
}

func TestTargetIndex(t *testing.T) {
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pa"},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"}},
	}
	c := &Controller{kind: &tidalKind{}, spec: Spec[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric]{Handles: func(*autoscalingv1alpha1.PodAutoscaler) bool { return true }}}
	keys, err := c.targetIndex(pa)
	if err != nil || len(keys) != 1 || keys[0] != "ns/StatefulSet.apps/db" {
		t.Errorf("targetIndex = %v, %v", keys, err)
	}
	// A Scale call naming the same target finds the same key.
	k, _ := targetKey(scale.Target{Namespace: "ns", Name: "db", APIVersion: "apps/v1", Kind: "StatefulSet"})
	if k != keys[0] {
		t.Errorf("targetKey = %q, index key %q", k, keys[0])
	}
}

// TestLockHoldsAcrossDeletion: a reconcile of a PodAutoscaler that is gone
// must not free its lock while another caller waits for it. The lock used to
// be deleted from a map by that reconcile while held: a Scale call already
// waiting on it then took the old lock while a new worker made a fresh one,
// and both ran at once. The order is forced: the worker queues on the held
// lock first and the Scale call second (a mutex wakes its waiters in order),
// so the worker's reconcile ends before the Scale call holds the lock.
func TestLockHoldsAcrossDeletion(t *testing.T) {
	empty := func() cache.Indexer { return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}) }
	k := &tidalKind{
		pas:     autoscalinglisters.NewPodAutoscalerLister(empty()),
		metrics: autoscalinglisters.NewMetricLister(empty()),
	}
	c := &Controller{
		kind:      k,
		spec:      Spec[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric]{Handles: func(*autoscalingv1alpha1.PodAutoscaler) bool { return true }, Gone: k.deleteOrphanMetric},
		written:   overlay.New[cache.ObjectName, *autoscalingv1alpha1.PodAutoscaler](),
		selectors: pods.NewSelectors[cache.ObjectName](),
	}
	c.Controller = controller.New(controller.Config{Name: "podautoscaler"}, zap.NewNop(), c.sync)
	name := cache.ObjectName{Namespace: "a", Name: "gone"}
	unlock := c.lock(name)
	// A worker reconciles the deleted PodAutoscaler: it queues on our lock.
	synced := make(chan error, 1)
	go func() { _, err := c.sync(context.Background(), name); synced <- err }()
	time.Sleep(20 * time.Millisecond)
	// A Scale call for it queues behind the worker and, once it holds the
	// lock, keeps it until told.
	holding, release := make(chan struct{}), make(chan struct{})
	go func() {
		u := c.lock(name)
		close(holding)
		<-release
		u()
	}()
	time.Sleep(20 * time.Millisecond)
	unlock()
	if err := <-synced; err != nil {
		t.Fatalf("sync of a deleted PodAutoscaler: %v", err)
	}
	<-holding
	// A new worker must wait for the Scale call.
	third := make(chan struct{})
	go func() { u := c.lock(name); close(third); u() }()
	select {
	case <-third:
		t.Fatal("a new caller took the lock while a Scale call held it")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-third
}

func TestConditionsTurned(t *testing.T) {
	type cond struct{ typ, status string }
	of := func(c cond) (string, string) { return c.typ, c.status }
	active := cond{"Active", "True"}
	ready := cond{"Ready", "True"}
	for _, tt := range []struct {
		name string
		a, b []cond
		want bool
	}{
		{"same", []cond{active, ready}, []cond{ready, active}, false},
		{"a status changed", []cond{active, ready}, []cond{{"Active", "False"}, ready}, true},
		{"one more", []cond{active}, []cond{active, ready}, true},
		{"one replaced", []cond{active}, []cond{ready}, true},
		{"none", nil, nil, false},
	} {
		if got := ConditionsTurned(tt.a, tt.b, of); got != tt.want {
			t.Errorf("%s: ConditionsTurned = %v, want %v", tt.name, got, tt.want)
		}
	}
}
