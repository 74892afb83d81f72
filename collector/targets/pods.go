package targets

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/tidalscale/tidal/collector/scrape"
)

// Ready reports whether a pod counts for scraping and for the ready count:
// Running, condition Ready=True, no deletion timestamp, and an IP (Knative's
// rule, spec/knative-kpa.md §2.2).
func Ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSource is one target's ready pods, rebuilt from the pod lister only
// when a pod of its namespace changed since the last call.
type podSource struct {
	lister  corelisters.PodNamespaceLister
	sel     labels.Selector
	port    string
	version *atomic.Uint64 // bumped on every pod event in the namespace

	// mu guards the cache.
	mu     sync.Mutex
	seen   uint64
	primed bool
	pods   []scrape.Pod
}

var _ scrape.PodSource = (*podSource)(nil)

func newPodSource(lister corelisters.PodNamespaceLister, sel labels.Selector, port int32, version *atomic.Uint64) *podSource {
	return &podSource{lister: lister, sel: sel, port: strconv.Itoa(int(port)), version: version}
}

// ReadyPods appends the target's ready pods to dst.
func (s *podSource) ReadyPods(dst []scrape.Pod) []scrape.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.version.Load(); !s.primed || v != s.seen {
		s.seen, s.primed = v, true
		s.pods = s.pods[:0]
		pods, _ := s.lister.List(s.sel) // a cache read: never fails
		for _, p := range pods {
			if !Ready(p) {
				continue
			}
			start := p.CreationTimestamp.Time
			if p.Status.StartTime != nil {
				start = p.Status.StartTime.Time
			}
			s.pods = append(s.pods, scrape.Pod{Name: p.Name, Addr: net.JoinHostPort(p.Status.PodIP, s.port), Start: start})
		}
	}
	return append(dst, s.pods...)
}

// IsReady reports whether the pod is still ready now.
func (s *podSource) IsReady(name string) bool {
	p, err := s.lister.Get(name)
	return err == nil && Ready(p) && s.sel.Matches(labels.Set(p.Labels))
}

// names returns the ready pods' names.
func (s *podSource) names() []string {
	pods := s.ReadyPods(nil)
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}
