package scale

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/test/workload"
)

// scrapeWindow is how recently a pod must have been scraped to count among
// its target's pods: two of the collector's 1 s scrape rounds, so a round
// that starts late does not drop the pods of the one before. When the
// collector's rounds come further apart than that (a starved machine), the
// window stretches to one and a half of the longest gap between two
// scrapes of the target's pods, up to maxScrapeWindow: otherwise a pod
// scraped after such a gap counts fewer pods than the collector does, and
// reports a share of the load the others report too (seen at load 38: a
// target whose load never changed went from 4 to 11 replicas).
const (
	scrapeWindow    = 2 * time.Second
	maxScrapeWindow = 10 * time.Second
)

// kpaLabel marks the Deployments (and pods) of KPA targets; its value is the
// target's name.
const kpaLabel = "tidal-scale-kpa"

// podFarm is every KPA target's pods in one process: one pod informer over
// the namespace, one listener per pod's IP at the queue-proxy port from
// when the pod has one until it terminates (the cluster marks pods Ready
// podReadyDelay after their IP, so the listener is there before the
// collector hears the pod is Ready; before, 3,000 targets saw thousands of
// refused scrapes of Ready pods on a starved machine, and the collector,
// which scales the pods it could scrape by the Ready count, read 5/4 of a
// target's load),
// and one HTTP server behind all listeners that answers with the pod's
// share of its target's concurrency. With one listener (newPodFarm), every
// pod is answered on a wildcard listener at the queue-proxy port instead,
// by the address the connection was made to: a pod then costs the process
// one descriptor, its collector connection, where the open-file limit does
// not fit two, but the run must have that port on every address to itself
// (make scale, alone on the machine; not tests beside others). It is cheap
// where test/workload is thorough: no queueing model and no per-target informer or ticker, so ten
// thousand targets cost one watch.
//
// A pod's share is the target's concurrency divided by the target's pods
// the collector scraped within the last scrapeWindow, not by the pods this
// process's informer sees Ready: the collector scales the sampled pods' mean
// by its own count of Ready pods, so the two counts must agree, as a load
// balancer and an autoscaler reading the same endpoints do. The collector
// scrapes every pod of a small target each round, so the pods it scraped
// lately are the pods it counts. Dividing by this process's count instead
// makes the collector see (its count / ours) of the load for as long as the
// two informers disagree, which on a loaded machine was long enough to move
// a 6 s stable window and scale targets away from their level for good.
type podFarm struct {
	srv *statServer
	// wildcard serves every pod when oneListener is set (newPodFarm).
	wildcard    net.Listener
	oneListener bool

	// mu guards pods, byIP, byTarget, firstScrape and each pod's
	// lastScrape.
	mu       sync.Mutex
	pods     map[string]*farmPod // by pod name
	byIP     map[string]*farmPod
	byTarget map[string][]*farmPod
	// firstScrape is when the collector first asked a target's pods for a
	// stat: the target's first sample.
	firstScrape map[string]time.Time
	// loads is each target's total concurrency (float64 bits), set by
	// SetLoad; read without mu.
	loads sync.Map // target → *atomic.Uint64

	listenErrs atomic.Int64
	firstErr   atomic.Value // error
}

type farmPod struct {
	name, target, ip string
	start            time.Time
	l                net.Listener
	// load is its target's entry in podFarm.loads: a scrape reads it
	// without looking the target up.
	load *atomic.Uint64
	// ready is whether the pod is Ready: Pods counts those.
	ready bool
	// lastScrape is when the collector last asked for the pod's stat, gap
	// the time since the scrape before.
	lastScrape time.Time
	gap        time.Duration
}

func newPodFarm(oneListener bool) *podFarm {
	f := &podFarm{pods: map[string]*farmPod{}, byIP: map[string]*farmPod{}, byTarget: map[string][]*farmPod{}, firstScrape: map[string]time.Time{},
		oneListener: oneListener}
	f.srv = newStatServer(f.stat)
	return f
}

// SetLoad sets a target's total concurrency, spread over its Ready pods.
func (f *podFarm) SetLoad(target string, concurrency float64) {
	f.loadOf(target).Store(math.Float64bits(concurrency))
}

// loadOf returns target's load, 0 until SetLoad sets it.
func (f *podFarm) loadOf(target string) *atomic.Uint64 {
	v, _ := f.loads.LoadOrStore(target, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// Run watches the namespace's KPA pods and serves them until ctx ends. It
// returns once the pod informer has synced; stop waits for the shutdown.
func (f *podFarm) Run(ctx context.Context, client kubernetes.Interface, ns string) (stop func(), err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kpaLabel }))
	inf := factory.Core().V1().Pods().Informer()
	sync := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			// A terminating pod is no longer scraped: served on, it
			// would count among its target's recent pods for a window
			// and lower the others' shares.
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				f.add(p)
			} else {
				f.remove(p.Name)
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				f.remove(p.Name)
			}
		},
	})
	if f.oneListener {
		// Addresses without a pod answer 503, as a pod not Ready yet.
		if f.wildcard, err = net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(queuestat.Port))); err != nil {
			return nil, fmt.Errorf("pod farm: %w", err)
		}
		f.srv.Serve(f.wildcard)
	}
	runCtx, cancel := context.WithCancel(ctx)
	factory.Start(runCtx.Done())
	stop = func() {
		cancel()
		factory.Shutdown()
		f.srv.Close() // its listeners, the pods' among them
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("pod farm: pod informer did not sync: %w", ctx.Err())
	}
	return stop, nil
}

func (f *podFarm) add(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ready := workload.PodReady(p)
	if old, ok := f.pods[p.Name]; ok {
		if old.ip == p.Status.PodIP {
			old.ready = ready
			return
		}
		f.removeLocked(old)
	}
	if other, ok := f.byIP[p.Status.PodIP]; ok {
		// kwok gave a deleted pod's IP to this one before the deletion
		// reached this informer: the address is this pod's now.
		f.removeLocked(other)
	}
	fp := &farmPod{name: p.Name, target: p.Labels[kpaLabel], ip: p.Status.PodIP, start: time.Now(), ready: ready}
	fp.load = f.loadOf(fp.target)
	if !f.oneListener {
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(queuestat.Port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			f.listenErrs.Add(1)
			f.firstErr.CompareAndSwap(nil, fmt.Errorf("pod %s: listen %s: %w", p.Name, addr, err))
			return
		}
		fp.l = l
		f.srv.Serve(l)
	}
	f.pods[p.Name] = fp
	f.byIP[fp.ip] = fp
	f.byTarget[fp.target] = append(f.byTarget[fp.target], fp)
}

func (f *podFarm) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.pods[name]; ok {
		f.removeLocked(p)
	}
}

func (f *podFarm) removeLocked(p *farmPod) {
	delete(f.pods, p.name)
	if f.byIP[p.ip] == p {
		delete(f.byIP, p.ip)
	}
	ps := f.byTarget[p.target]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(f.byTarget, p.target)
	} else {
		f.byTarget[p.target] = ps
	}
	if p.l != nil {
		_ = p.l.Close()
	}
}

// Err is the first listen error and how many there were.
func (f *podFarm) Err() (int64, error) {
	err, _ := f.firstErr.Load().(error)
	return f.listenErrs.Load(), err
}

// FirstScrape is when the collector first scraped one of target's pods.
func (f *podFarm) FirstScrape(target string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.firstScrape[target]
	return t, ok
}

// Pods is how many Ready pods are being served.
func (f *podFarm) Pods() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.pods {
		if p.ready {
			n++
		}
	}
	return n
}

// stat appends to b the stat of the pod at address ip, asked for at now;
// false when no pod has that address.
func (f *podFarm) stat(b []byte, ip string, now time.Time) ([]byte, bool) {
	f.mu.Lock()
	p, ok := f.byIP[ip]
	ready := 0
	if ok {
		if !p.lastScrape.IsZero() {
			p.gap = now.Sub(p.lastScrape)
		} else if _, seen := f.firstScrape[p.target]; !seen {
			// A target's first scrape is some pod's first.
			f.firstScrape[p.target] = now
		}
		p.lastScrape = now
		window := scrapeWindow
		for _, q := range f.byTarget[p.target] {
			window = max(window, min(q.gap*3/2, maxScrapeWindow))
		}
		for _, q := range f.byTarget[p.target] {
			if !q.lastScrape.IsZero() && now.Sub(q.lastScrape) <= window {
				ready++
			}
		}
	}
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	c := math.Float64frombits(p.load.Load()) / float64(ready)
	return queuestat.Append(b, queuestat.Stat{
		PodName:                   p.name,
		AverageConcurrentRequests: c,
		// One request a second per unit of concurrency: a 1 s request.
		RequestCount:  c,
		ProcessUptime: now.Sub(p.start).Seconds(),
		Timestamp:     now.Unix(),
	}), true
}
