// Package watch fans a decider's decisions out to its WatchDecisions
// streams. Publishing never blocks: a watcher that falls a whole buffer
// behind is dropped rather than allowed to stall the tick loop or the other
// watchers, and the streams are bounded per decider and per caller.
package watch

import (
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/tidalscale/tidal/decider/engine"
)

// Config bounds the watchers of one decider.
type Config struct {
	// Buffer is how many decisions a watcher may fall behind before it is
	// dropped. The buffer grows with the backlog, so an idle watcher costs
	// nothing for it.
	Buffer int
	// MaxWatchers bounds the watchers of the decider; MaxPerCaller those of
	// one caller identity.
	MaxWatchers  int
	MaxPerCaller int
}

// RegisterFlagsWithPrefix registers the watch flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.IntVar(&c.Buffer, p+"watch-buffer", 1024, "Decisions a WatchDecisions stream may fall behind before it is ended as too slow.")
	fs.IntVar(&c.MaxWatchers, p+"watch-max-streams", 256, "WatchDecisions streams open at once on this decider; one more is refused.")
	fs.IntVar(&c.MaxPerCaller, p+"watch-max-streams-per-caller", 16, "WatchDecisions streams open at once for one caller; one more is refused.")
}

// Validate refuses values that would disable a bound.
func (c *Config) Validate() error {
	if c.Buffer < 1 || c.Buffer > 1<<20 {
		return fmt.Errorf("--watch-buffer %d: want 1 to %d", c.Buffer, 1<<20)
	}
	if c.MaxWatchers < 1 {
		return fmt.Errorf("--watch-max-streams %d: want at least 1", c.MaxWatchers)
	}
	if c.MaxPerCaller < 1 || c.MaxPerCaller > c.MaxWatchers {
		return fmt.Errorf("--watch-max-streams-per-caller %d: want 1 to --watch-max-streams (%d)", c.MaxPerCaller, c.MaxWatchers)
	}
	return nil
}

var (
	// ErrTooManyWatchers refuses a watcher beyond Config.MaxWatchers.
	ErrTooManyWatchers = errors.New("too many watchers on this decider")
	// ErrTooManyForCaller refuses a watcher beyond Config.MaxPerCaller.
	ErrTooManyForCaller = errors.New("too many watchers for this caller")
)

// Hub fans decisions out to watchers.
type Hub struct {
	cfg Config

	// mu guards watchers, perCaller and total. Publish holds it while it
	// hands a batch to every watcher, taking each watcher's own lock briefly.
	mu sync.Mutex
	// watchers are the subscriptions not dropped.
	watchers map[*Watcher]struct{}
	// perCaller and total count the subscriptions, dropped ones included
	// until they unsubscribe: a dropped stream is open until its handler
	// returns.
	perCaller map[string]int
	total     int

	refused *prometheus.CounterVec
	dropped prometheus.Counter
}

// Watcher is one subscription.
type Watcher struct {
	namespace string
	caller    string

	// mu guards queue and gone.
	mu    sync.Mutex
	queue []engine.Decision
	// gone is set once the hub dropped the watcher.
	gone bool
	// ready holds a token while queue has decisions.
	ready chan struct{}
	// dropped is closed when the hub dropped the watcher for being slow.
	dropped chan struct{}
}

// NewHub returns a Hub without watchers; reg receives its metrics.
func NewHub(cfg Config, reg prometheus.Registerer) *Hub {
	h := &Hub{cfg: cfg, watchers: map[*Watcher]struct{}{}, perCaller: map[string]int{}}
	f := promauto.With(reg)
	h.refused = f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_decider_watch_refused_total",
		Help: "WatchDecisions streams refused, by reason: server-limit, caller-limit.",
	}, []string{"reason"})
	h.refused.WithLabelValues("server-limit")
	h.refused.WithLabelValues("caller-limit")
	h.dropped = f.NewCounter(prometheus.CounterOpts{
		Name: "tidal_decider_watchers_dropped_total",
		Help: "WatchDecisions streams ended for falling a whole buffer of decisions behind.",
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_decider_watchers",
		Help: "WatchDecisions streams open.",
	}, func() float64 { return float64(h.Len()) })
	return h
}

// Len returns the number of subscriptions, dropped ones included until
// they unsubscribe.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Subscribe adds a watcher of namespace's decisions ("" for all) for
// caller, or refuses it when the decider or the caller has its most.
// Every watcher must be unsubscribed, dropped or not.
func (h *Hub) Subscribe(namespace, caller string) (*Watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.total >= h.cfg.MaxWatchers:
		h.refused.WithLabelValues("server-limit").Inc()
		return nil, fmt.Errorf("%w (at most %d)", ErrTooManyWatchers, h.cfg.MaxWatchers)
	case h.perCaller[caller] >= h.cfg.MaxPerCaller:
		h.refused.WithLabelValues("caller-limit").Inc()
		return nil, fmt.Errorf("%w (at most %d)", ErrTooManyForCaller, h.cfg.MaxPerCaller)
	}
	w := &Watcher{namespace: namespace, caller: caller, ready: make(chan struct{}, 1), dropped: make(chan struct{})}
	h.watchers[w] = struct{}{}
	h.perCaller[caller]++
	h.total++
	return w, nil
}

// Unsubscribe removes w and frees its place.
func (h *Hub) Unsubscribe(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
	h.total--
	if h.perCaller[w.caller]--; h.perCaller[w.caller] <= 0 {
		delete(h.perCaller, w.caller)
	}
}

// Ready has a token when the watcher has decisions to Take.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Dropped is closed when the hub dropped the watcher for falling behind.
func (w *Watcher) Dropped() <-chan struct{} { return w.dropped }

// Take returns the decisions queued for the watcher, oldest first, and
// keeps buf (emptied) as the next queue, so a watcher that keeps up
// allocates nothing. The caller must not use buf afterwards.
func (w *Watcher) Take(buf []engine.Decision) []engine.Decision {
	clear(buf)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.queue
	w.queue = buf[:0]
	return out
}

// Publish hands decisions to every watcher. It never waits for one: a
// watcher whose backlog would pass the buffer is dropped instead.
func (h *Hub) Publish(ds []engine.Decision) {
	if len(ds) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if !w.deliver(ds, h.cfg.Buffer) {
			delete(h.watchers, w)
			h.dropped.Inc()
		}
	}
}

// deliver queues the watcher's share of ds; false means its backlog passed
// limit, and the watcher is dropped: its queue is freed and Dropped closed.
func (w *Watcher) deliver(ds []engine.Decision, limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return false
	}
	n := len(w.queue)
	for i := range ds {
		if w.namespace != "" && ds[i].Target.Namespace != w.namespace {
			continue
		}
		if len(w.queue) == limit {
			w.gone = true
			w.queue = nil
			close(w.dropped)
			return false
		}
		w.queue = append(w.queue, ds[i])
	}
	if len(w.queue) > n {
		select {
		case w.ready <- struct{}{}:
		default: // a token is waiting already
		}
	}
	return true
}
