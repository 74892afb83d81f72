// Package watch fans a decider's decisions out to its WatchDecisions
// streams, dropping a watcher that falls behind rather than stalling the
// tick loop.
package watch

import (
	"sync"

	"github.com/tidalscale/tidal/decider/engine"
)

// Hub fans decisions out to watchers. A watcher that falls a whole buffer
// behind is dropped rather than allowed to stall the tick loop.
type Hub struct {
	// mu guards watchers.
	mu       sync.Mutex
	watchers map[*Watcher]struct{}
}

// Watcher is one subscription.
type Watcher struct {
	namespace string
	ch        chan engine.Decision
	// dropped is closed when the hub dropped the watcher for being slow.
	dropped chan struct{}
}

// Buffer is how many decisions a watcher may fall behind before it is dropped.
const Buffer = 1024

// NewHub returns a Hub without watchers.
func NewHub() *Hub { return &Hub{watchers: map[*Watcher]struct{}{}} }

// Subscribe adds a watcher of namespace's decisions ("" for all).
func (h *Hub) Subscribe(namespace string) *Watcher {
	w := &Watcher{namespace: namespace, ch: make(chan engine.Decision, Buffer), dropped: make(chan struct{})}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
	return w
}

// Unsubscribe removes w.
func (h *Hub) Unsubscribe(w *Watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// C delivers the watcher's decisions.
func (w *Watcher) C() <-chan engine.Decision { return w.ch }

// Dropped is closed when the hub dropped the watcher for falling behind.
func (w *Watcher) Dropped() <-chan struct{} { return w.dropped }

// Publish hands decisions to every watcher.
func (h *Hub) Publish(ds []engine.Decision) {
	if len(ds) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if !w.deliver(ds) {
			close(w.dropped)
			delete(h.watchers, w)
		}
	}
}

// deliver queues the watcher's share of ds; false means its buffer is full.
func (w *Watcher) deliver(ds []engine.Decision) bool {
	for _, d := range ds {
		if w.namespace != "" && d.Target.Namespace != w.namespace {
			continue
		}
		select {
		case w.ch <- d:
		default:
			return false
		}
	}
	return true
}
