package main

import (
	"sync"

	"github.com/tidalscale/tidal/decider/engine"
)

// hub fans decisions out to WatchDecisions streams. A watcher that falls a
// whole buffer behind is dropped rather than allowed to stall the tick loop.
type hub struct {
	// mu guards watchers.
	mu       sync.Mutex
	watchers map[*watcher]struct{}
}

type watcher struct {
	namespace string
	ch        chan engine.Decision
	// dropped is closed when the hub dropped the watcher for being slow.
	dropped chan struct{}
}

const watcherBuffer = 1024

func newHub() *hub { return &hub{watchers: map[*watcher]struct{}{}} }

func (h *hub) subscribe(namespace string) *watcher {
	w := &watcher{namespace: namespace, ch: make(chan engine.Decision, watcherBuffer), dropped: make(chan struct{})}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
	return w
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

func (h *hub) publish(ds []engine.Decision) {
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
func (w *watcher) deliver(ds []engine.Decision) bool {
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
