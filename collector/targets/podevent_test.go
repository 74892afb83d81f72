package targets

import (
	"context"
	"fmt"
	"sync"
	"time"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tidalscale/tidal/actuator/crdclient"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/pods"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// recorder is a Sink, Scraper and LagFetcher that keeps the last ready
// count and pod source of each target.
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
	tidal, err := crdclient.NewForConfig(cfg)
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

// podEvent delivers a pod update to d's handler.
func podEvent(d *Discovery, old, p *corev1.Pod) { d.podChanged(p) }

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
			p := seededPod(ns, serviceName(n/2), n/2, 0)
			buf := make([]scrape.Pod, 0, podsPer)
			b.ResetTimer()
			for b.Loop() {
				podEvent(d, p, p)
				drain(d)
				for _, s := range srcs {
					buf = s.ReadyPods(buf[:0])
				}
			}
		})
	}
}
