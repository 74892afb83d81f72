package targets

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/pods"
)

// podSource is one target's ready pods, rebuilt from the pod cache's label
// index only when one of the target's pods changed since the last call.
type podSource struct {
	indexer cache.Indexer // the pod cache, with pods' label index
	ns      string
	sel     labels.Selector
	port    string
	// version is bumped by every event of a pod sel matches.
	version atomic.Uint64

	// mu guards the cache.
	mu     sync.Mutex
	seen   uint64
	primed bool
	pods   []scrape.Pod
}

var _ scrape.PodSource = (*podSource)(nil)

func newPodSource(indexer cache.Indexer, ns string, sel labels.Selector, port int32) *podSource {
	return &podSource{indexer: indexer, ns: ns, sel: sel, port: strconv.Itoa(int(port))}
}

// changed marks the cached pods stale: one of the target's pods changed.
func (s *podSource) changed() { s.version.Add(1) }

// ReadyPods appends the target's ready pods to dst.
func (s *podSource) ReadyPods(dst []scrape.Pod) []scrape.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.version.Load(); !s.primed || v != s.seen {
		s.seen, s.primed = v, true
		s.pods = s.pods[:0]
		objs, _ := pods.List(s.indexer, s.ns, s.sel) // a cache read: fails only without the index
		for _, o := range objs {
			p, ok := o.(*pods.Pod)
			if !ok || !p.Ready() {
				continue
			}
			start := p.CreationTimestamp.Time
			if p.StartTime != nil {
				start = p.StartTime.Time
			}
			s.pods = append(s.pods, scrape.Pod{Name: p.Name, Addr: net.JoinHostPort(p.IP, s.port), Start: start})
		}
	}
	return append(dst, s.pods...)
}

// IsReady reports whether the pod is still ready now.
func (s *podSource) IsReady(name string) bool {
	obj, _, err := s.indexer.GetByKey(s.ns + "/" + name)
	p := pods.Of(obj)
	return err == nil && p != nil && p.Ready() && s.sel.Matches(labels.Set(p.Labels))
}

// names returns the ready pods' names.
func (s *podSource) names() []string {
	ready := s.ReadyPods(nil)
	out := make([]string, len(ready))
	for i, p := range ready {
		out[i] = p.Name
	}
	return out
}
