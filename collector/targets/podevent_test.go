package targets

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/pods"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// recorder is a Sink and a Scraper that keeps the last ready count and pod
// source of each target.
type recorder struct {
	// mu guards both maps.
	mu      sync.Mutex
	ready   map[string]int32
	sources map[string]scrape.PodSource
}

func newRecorder() *recorder {
	return &recorder{ready: map[string]int32{}, sources: map[string]scrape.PodSource{}}
}

func (r *recorder) SetSpec(*deciderv1.TargetSpec, time.Duration) {}
func (r *recorder) Remove(ref *commonv1.TargetRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ready, ref.Key())
	delete(r.sources, ref.Key())
}
func (r *recorder) Drop(ref *commonv1.TargetRef) { r.Remove(ref) }
func (r *recorder) SetReadyPods(ref *commonv1.TargetRef, n int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready[ref.Key()] = n
}
func (r *recorder) SetError(*commonv1.TargetRef, string) {}
func (r *recorder) Set(t scrape.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources[t.Ref.Key()] = t.Pods
}

func (r *recorder) readyOf(ref *commonv1.TargetRef) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready[ref.Key()]
}

// lagRecorder adapts recorder to LagFetcher (its Set takes a lag target).
type lagRecorder struct{ *recorder }

func (lagRecorder) Set(lag.Target) {}

// newUnstartedDiscovery returns a Discovery whose informers are never
// started: tests fill its caches and drive its handlers directly.
func newUnstartedDiscovery(tb testing.TB) (*Discovery, *recorder) {
	tb.Helper()
	cfg := &rest.Config{Host: "http://127.0.0.1:1"} // never dialled
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tidal, err := tidalclient.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	rec := newRecorder()
	return New(Config{}, kube, tidal, rec, rec, lagRecorder{rec}, zap.NewNop()), rec
}

// serviceName is the name of seeded target i; its pods carry app=name.
func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func seededPod(ns, app string, i, j int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", app, j), Labels: map[string]string{"app": app, "tier": "web"}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", i>>8&0xff, i&0xff, j+1),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// seed puts n KPA targets of namespace ns in d's caches, each selecting its
// own podsPer ready pods (app=serviceName(i)), and reconciles them as Start
// does.
func seed(tb testing.TB, d *Discovery, ns string, n, podsPer int) {
	tb.Helper()
	for i := range n {
		name := serviceName(i)
		pa, m := kpaObjects(ns, name, map[string]string{"app": name})
		if err := d.crd.PodAutoscalers.GetStore().Add(pa); err != nil {
			tb.Fatal(err)
		}
		if err := d.crd.Metrics.GetStore().Add(m); err != nil {
			tb.Fatal(err)
		}
		for j := range podsPer {
			setPod(tb, d, seededPod(ns, name, i, j))
		}
		d.queue.Add("m/" + ns + "/" + name)
	}
	drain(d)
}

// setPod puts p in the pod cache as the informer would, trimmed.
func setPod(tb testing.TB, d *Discovery, p *corev1.Pod) {
	tb.Helper()
	obj, err := pods.Trim(p)
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.podInformer.GetIndexer().Update(obj); err != nil {
		tb.Fatal(err)
	}
}

// drain reconciles every queued key.
func drain(d *Discovery) {
	for d.queue.Len() > 0 {
		d.processNext(context.Background())
	}
}

// podEvent delivers a pod update to d's handler; a nil old is an add.
// The handler gets them trimmed, as the informer keeps them.
func podEvent(d *Discovery, old, p *corev1.Pod) {
	trimmed, _ := pods.Trim(p)
	if old == nil {
		d.podChanged(nil, trimmed)
		return
	}
	was, _ := pods.Trim(old)
	d.podChanged(was, trimmed)
}

// versions is every followed target's pod source version, by source key.
func versions(d *Discovery) map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]uint64{}
	for k, a := range d.active {
		if a.pods != nil {
			out[k] = a.pods.version.Load()
		}
	}
	return out
}

// bumped lists the source keys whose version moved from before.
func bumped(d *Discovery, before map[string]uint64) []string {
	var out []string
	for k, v := range versions(d) {
		if v != before[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// queued takes every queued key off d's queue, sorted, without syncing.
func queued(d *Discovery) []string {
	var out []string
	for d.queue.Len() > 0 {
		k, _ := d.queue.Get()
		d.queue.Done(k)
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func targetOf(ns string, i int) *commonv1.TargetRef {
	return &commonv1.TargetRef{Namespace: ns, Name: serviceName(i) + "-deployment"}
}

// TestPodEventTouchesOnlyItsTarget is issue 12's case: among 2,000 targets
// of one namespace, a pod event enqueues and invalidates the one target
// that selects the pod, and no other target re-lists its pods.
func TestPodEventTouchesOnlyItsTarget(t *testing.T) {
	t.Parallel()
	const ns, n = "busy", 2000
	d, rec := newUnstartedDiscovery(t)
	seed(t, d, ns, n, 3)
	if got, want := d.selectors.Len(), n; got != want {
		t.Fatalf("selectors filed = %d, want %d", got, want)
	}
	before := versions(d)

	old := seededPod(ns, serviceName(42), 42, 1)
	old.ResourceVersion = "1"
	notReady := old.DeepCopy()
	notReady.ResourceVersion = "2"
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	setPod(t, d, notReady)
	podEvent(d, old, notReady)

	want := []string{"m/" + ns + "/" + serviceName(42)}
	if got := bumped(d, before); !slices.Equal(got, want) {
		t.Errorf("pod sources invalidated = %q, want %q", got, want)
	}
	if d.queue.Len() != 1 {
		t.Fatalf("queue length = %d, want 1", d.queue.Len())
	}
	drain(d)
	if got, want := rec.readyOf(targetOf(ns, 42)), int32(2); got != want {
		t.Errorf("ready pods of the pod's target = %d, want %d", got, want)
	}
	if got, want := rec.readyOf(targetOf(ns, 43)), int32(3); got != want {
		t.Errorf("ready pods of another target = %d, want %d", got, want)
	}
	if got, want := len(d.ReadyPodNames(targetOf(ns, 42))), 2; got != want {
		t.Errorf("ReadyPodNames of the pod's target: %d names, want %d", got, want)
	}
}

// TestPodEvents checks which targets each kind of pod event reaches.
func TestPodEvents(t *testing.T) {
	t.Parallel()
	const ns = "events"
	src := func(i int) string { return "m/" + ns + "/" + serviceName(i) }
	tests := []struct {
		name string
		// event changes the cache and delivers the event.
		event func(t *testing.T, d *Discovery)
		// want are the source keys enqueued and invalidated.
		want []string
		// ready are the ready counts after the sync, by target.
		ready map[int]int32
	}{{
		name: "added",
		event: func(t *testing.T, d *Discovery) {
			p := seededPod(ns, serviceName(1), 1, 7)
			setPod(t, d, p)
			podEvent(d, nil, p)
		},
		want:  []string{src(1)},
		ready: map[int]int32{0: 3, 1: 4, 2: 3},
	}, {
		name: "relabelled to another target",
		event: func(t *testing.T, d *Discovery) {
			old := seededPod(ns, serviceName(1), 1, 0)
			old.ResourceVersion = "1"
			p := old.DeepCopy()
			p.ResourceVersion = "2"
			p.Labels["app"] = serviceName(2)
			setPod(t, d, p)
			podEvent(d, old, p)
		},
		want:  []string{src(1), src(2)},
		ready: map[int]int32{0: 3, 1: 2, 2: 4},
	}, {
		name: "resync",
		event: func(t *testing.T, d *Discovery) {
			p := seededPod(ns, serviceName(1), 1, 0)
			p.ResourceVersion = "1"
			podEvent(d, p, p)
		},
		ready: map[int]int32{0: 3, 1: 3, 2: 3},
	}, {
		name: "deleted, final state unknown",
		event: func(t *testing.T, d *Discovery) {
			p := seededPod(ns, serviceName(0), 0, 2)
			if err := d.podInformer.GetIndexer().Delete(p); err != nil {
				t.Fatal(err)
			}
			trimmed, _ := pods.Trim(p) // the informer's last copy
			d.podChanged(nil, cache.DeletedFinalStateUnknown{Key: ns + "/" + p.Name, Obj: trimmed})
		},
		want:  []string{src(0)},
		ready: map[int]int32{0: 2, 1: 3, 2: 3},
	}, {
		name: "unselected pod",
		event: func(t *testing.T, d *Discovery) {
			p := seededPod(ns, "other", 9, 0)
			setPod(t, d, p)
			podEvent(d, nil, p)
		},
		ready: map[int]int32{0: 3, 1: 3, 2: 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, rec := newUnstartedDiscovery(t)
			seed(t, d, ns, 3, 3)
			for i := range 3 { // prime every source, as a scrape does
				d.ReadyPodNames(targetOf(ns, i))
			}
			before := versions(d)
			tt.event(t, d)
			if got, want := bumped(d, before), tt.want; !slices.Equal(got, want) {
				t.Errorf("pod sources invalidated = %q, want %q", got, want)
			}
			keys := queued(d)
			if !slices.Equal(keys, tt.want) {
				t.Errorf("enqueued = %q, want %q", keys, tt.want)
			}
			for _, k := range keys {
				if err := d.sync(context.Background(), k); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range tt.ready {
				if got := rec.readyOf(targetOf(ns, i)); got != want {
					t.Errorf("ready pods of %s = %d, want %d", serviceName(i), got, want)
				}
				if got := len(d.ReadyPodNames(targetOf(ns, i))); got != int(want) {
					t.Errorf("ReadyPodNames of %s: %d names, want %d", serviceName(i), got, want)
				}
			}
		})
	}
}

// TestPodEventReachesUnanchoredSelector: a selector that requires no single
// label value is tried on every pod event of its namespace.
func TestPodEventReachesUnanchoredSelector(t *testing.T) {
	t.Parallel()
	const ns = "unanchored"
	d, rec := newUnstartedDiscovery(t)
	seed(t, d, ns, 2, 1)
	pa, m := kpaObjects(ns, "web", nil)
	m.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}},
	}}
	if err := d.crd.PodAutoscalers.GetStore().Add(pa); err != nil {
		t.Fatal(err)
	}
	if err := d.crd.Metrics.GetStore().Add(m); err != nil {
		t.Fatal(err)
	}
	d.queue.Add("m/" + ns + "/web")
	drain(d)
	web := &commonv1.TargetRef{Namespace: ns, Name: "web-deployment"}
	if got, want := rec.readyOf(web), int32(2); got != want {
		t.Fatalf("ready pods of tier in (web, api) = %d, want %d", got, want)
	}

	p := seededPod(ns, serviceName(1), 1, 5)
	setPod(t, d, p)
	podEvent(d, nil, p)
	if got, want := queued(d), []string{"m/" + ns + "/" + serviceName(1), "m/" + ns + "/web"}; !slices.Equal(got, want) {
		t.Errorf("enqueued = %q, want %q", got, want)
	}
}

// TestRemovedTargetForgotten: a removed target leaves neither its selector
// nor its ReadyPodNames entry behind.
func TestRemovedTargetForgotten(t *testing.T) {
	t.Parallel()
	const ns = "gone"
	d, _ := newUnstartedDiscovery(t)
	seed(t, d, ns, 2, 2)
	ref := targetOf(ns, 0)
	if got := d.ReadyPodNames(ref); len(got) != 2 {
		t.Fatalf("ReadyPodNames = %v, want 2 names", got)
	}
	_, m := kpaObjects(ns, serviceName(0), nil)
	if err := d.crd.Metrics.GetStore().Delete(m); err != nil {
		t.Fatal(err)
	}
	d.queue.Add("m/" + ns + "/" + serviceName(0))
	drain(d)
	if got := d.ReadyPodNames(ref); got != nil {
		t.Errorf("ReadyPodNames after removal = %v, want none", got)
	}
	d.mu.Lock()
	following, active := len(d.following), len(d.active)
	d.mu.Unlock()
	if following != 1 || active != 1 || d.selectors.Len() != 1 {
		t.Errorf("after removal: %d following, %d active, %d selectors; want 1 each", following, active, d.selectors.Len())
	}
}

// BenchmarkPodEvent is the cost of one pod event among n targets of one
// namespace with 3 pods each: the handler, the reconcile of what it
// enqueued, and the next scrape's ReadyPods of every target (which re-lists
// a target's pods if the event invalidated them).
func BenchmarkPodEvent(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			const ns, podsPer = "bench", 3
			d, rec := newUnstartedDiscovery(b)
			seed(b, d, ns, n, podsPer)
			srcs := make([]scrape.PodSource, 0, n)
			for _, s := range rec.sources {
				srcs = append(srcs, s)
			}
			if len(srcs) != n {
				b.Fatalf("%d scrape targets, want %d", len(srcs), n)
			}
			old := seededPod(ns, serviceName(n/2), n/2, 0)
			old.ResourceVersion = "1"
			p := old.DeepCopy()
			p.ResourceVersion = "2"
			buf := make([]scrape.Pod, 0, podsPer)
			b.ResetTimer()
			for b.Loop() {
				podEvent(d, old, p)
				drain(d)
				for _, s := range srcs {
					buf = s.ReadyPods(buf[:0])
				}
			}
		})
	}
}
