package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/collector/queuestat"
)

// Options configure a Workload.
type Options struct {
	// Client reads the Deployment and watches its pods.
	Client kubernetes.Interface
	// Namespace and Deployment name the simulated workload.
	Namespace, Deployment string
	// Profile is the request arrival rate over time, starting at Start.
	Profile Profile
	// Model is how the pods serve requests.
	Model ModelConfig
	// MetricsPort is the queue-proxy metrics port on each pod IP; 0 means
	// 9090.
	MetricsPort int
	// PrometheusPort, if not 0, also serves the queue-proxy's old
	// Prometheus text series on each pod IP at that port, /metrics.
	PrometheusPort int
	// Tick is how often the model advances in wall time; 0 means 10 ms.
	Tick time.Duration
	// TrafficPort, if not 0, also serves requests on each pod IP at that
	// port, every path, with Traffic(pod name): the pod's queue-proxy
	// serving port, for tests that send requests to the pods.
	TrafficPort int
	Traffic     func(pod string) http.Handler
}

// Workload simulates a Deployment's pods: one queue-proxy metrics endpoint
// per Ready pod, fed by a shared load model advanced in wall time.
type Workload struct {
	opts   Options
	cancel context.CancelFunc
	done   sync.WaitGroup

	// mu guards model and servers.
	mu      sync.Mutex
	model   *Model
	servers map[string]*podServer // by pod name
	err     error                 // first listen error, reported by Err
}

type podServer struct {
	ip      string
	servers []*http.Server
}

// Start looks up the Deployment, starts watching its pods, and returns once
// the endpoints of the pods Ready at that moment are listening. Load starts
// at once. Stop releases everything.
func Start(ctx context.Context, opts Options) (*Workload, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Deployment == "" {
		return nil, errors.New("workload: Client, Namespace and Deployment are required")
	}
	if opts.MetricsPort == 0 {
		opts.MetricsPort = queuestat.Port
	}
	if opts.Tick == 0 {
		opts.Tick = 10 * time.Millisecond
	}
	if opts.Profile == nil {
		opts.Profile = Constant(0)
	}
	model, err := NewModel(opts.Model, opts.Profile, time.Now())
	if err != nil {
		return nil, fmt.Errorf("workload %s/%s: %w", opts.Namespace, opts.Deployment, err)
	}
	dep, err := opts.Client.AppsV1().Deployments(opts.Namespace).Get(ctx, opts.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("workload %s/%s: selector: %w", opts.Namespace, opts.Deployment, err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	w := &Workload{opts: opts, cancel: cancel, model: model, servers: map[string]*podServer{}}
	synced, waitWatch := watchPods(runCtx, opts.Client, opts.Namespace, sel.String(), podEvents{ready: w.addPod, gone: w.removePod})
	w.done.Go(waitWatch)
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		w.Stop()
		return nil, fmt.Errorf("workload %s/%s: pod informer did not sync: %w", opts.Namespace, opts.Deployment, ctx.Err())
	}
	w.done.Go(func() { w.tick(runCtx) })
	return w, nil
}

func (w *Workload) addPod(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.servers[p.Name]; ok && s.ip == p.Status.PodIP {
		return
	}
	if ps, err := w.serveLocked(p.Name, p.Status.PodIP); err != nil {
		for name, other := range w.servers {
			if other.ip == p.Status.PodIP {
				err = fmt.Errorf("%w (pod %s has that IP too)", err, name)
			}
		}
		if w.err == nil {
			w.err = err
		}
	} else {
		w.servers[p.Name] = ps
		w.model.AddPod(p.Name, time.Now())
	}
}

func (w *Workload) removePod(name string) {
	w.mu.Lock()
	s, ok := w.servers[name]
	delete(w.servers, name)
	if ok {
		w.model.RemovePod(name, time.Now())
	}
	w.mu.Unlock()
	if ok {
		s.close()
	}
}

// serveLocked listens on the pod's IP and serves its endpoints.
func (w *Workload) serveLocked(name, ip string) (*podServer, error) {
	ps := &podServer{ip: ip}
	type portHandler struct {
		port int
		h    http.Handler
	}
	metrics := func(h http.HandlerFunc) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("GET "+queuestat.Path, h)
		return mux
	}
	handlers := []portHandler{{w.opts.MetricsPort, metrics(func(rw http.ResponseWriter, r *http.Request) { w.serveStat(rw, r, name) })}}
	if w.opts.PrometheusPort != 0 {
		handlers = append(handlers, portHandler{w.opts.PrometheusPort, metrics(func(rw http.ResponseWriter, r *http.Request) { w.servePrometheus(rw, r, name) })})
	}
	if w.opts.TrafficPort != 0 && w.opts.Traffic != nil {
		handlers = append(handlers, portHandler{w.opts.TrafficPort, w.opts.Traffic(name)})
	}
	for _, h := range handlers {
		addr := net.JoinHostPort(ip, strconv.Itoa(h.port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			ps.close()
			return nil, fmt.Errorf("workload: pod %s: listen %s: %w", name, addr, err)
		}
		srv := &http.Server{Handler: h.h, ReadHeaderTimeout: 5 * time.Second}
		ps.servers = append(ps.servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	return ps, nil
}

func (s *podServer) close() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
}

// stat returns the pod's current report, advancing the model to now first.
func (w *Workload) stat(name string) (queuestat.Stat, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.model.Advance(time.Now())
	return w.model.Stat(name)
}

func (w *Workload) serveStat(rw http.ResponseWriter, _ *http.Request, name string) {
	s, ok := w.stat(name)
	if !ok {
		http.Error(rw, "pod not ready", http.StatusServiceUnavailable)
		return
	}
	b := queuestat.Marshal(s)
	rw.Header().Set("Content-Type", queuestat.ContentType)
	rw.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = rw.Write(b)
}

// servePrometheus serves the series the queue-proxy exported before Knative
// removed its Prometheus reporter (before knative.dev/serving v0.50.0).
func (w *Workload) servePrometheus(rw http.ResponseWriter, _ *http.Request, name string) {
	s, ok := w.stat(name)
	if !ok {
		http.Error(rw, "pod not ready", http.StatusServiceUnavailable)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	for _, m := range []struct {
		name, help string
		v          float64
	}{
		{"queue_average_concurrent_requests", "Average number of requests in the pod over the last reporting period.", s.AverageConcurrentRequests},
		{"queue_average_proxied_concurrent_requests", "Average number of proxied requests in the pod over the last reporting period.", s.AverageProxiedConcurrentRequests},
		{"queue_requests_per_second", "Requests that arrived in the last reporting period, per second.", s.RequestCount},
		{"queue_proxied_operations_per_second", "Proxied requests that arrived in the last reporting period, per second.", s.ProxiedRequestCount},
		{"process_uptime", "Seconds since the queue-proxy started.", s.ProcessUptime},
	} {
		fmt.Fprintf(rw, "# HELP %s %s\n# TYPE %s gauge\n%s{destination_pod=%q} %s\n",
			m.name, m.help, m.name, m.name, name, strconv.FormatFloat(m.v, 'g', -1, 64))
	}
}

func (w *Workload) tick(ctx context.Context) {
	t := time.NewTicker(w.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.mu.Lock()
			w.model.Advance(now)
			w.mu.Unlock()
		}
	}
}

// Report says what users would have felt so far.
func (w *Workload) Report() Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.model.Advance(time.Now())
	return w.model.Report()
}

// Endpoints returns the metrics URL of every pod being served, by pod name.
func (w *Workload) Endpoints() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.servers))
	for name, s := range w.servers {
		out[name] = "http://" + net.JoinHostPort(s.ip, strconv.Itoa(w.opts.MetricsPort)) + queuestat.Path
	}
	return out
}

// Err returns the first error serving a pod's endpoint (such as an address
// already in use), or nil.
func (w *Workload) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop stops watching, closes every endpoint and waits for the goroutines.
func (w *Workload) Stop() {
	w.cancel()
	w.done.Wait()
	w.mu.Lock()
	servers := w.servers
	w.servers = map[string]*podServer{}
	w.mu.Unlock()
	for _, s := range servers {
		s.close()
	}
}
