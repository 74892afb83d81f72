package watch

import (
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/test/gathered"
)

// defaults is the Config the flags give, so tests never restate defaults.
func defaults(t *testing.T) Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.RegisterFlagsWithPrefix("", fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	return c
}

func decision(ns string, i int) engine.Decision {
	return engine.Decision{Target: engine.Target{Namespace: ns, Name: fmt.Sprintf("t%d", i)}, Desired: int32(i)}
}

func subscribe(t *testing.T, h *Hub, ns, caller string) *Watcher {
	t.Helper()
	w, err := h.Subscribe(ns, caller)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q) = %v", ns, caller, err)
	}
	return w
}

func TestHubFiltersAndDropsSlowWatchers(t *testing.T) {
	cfg := defaults(t)
	cfg.Buffer = 4
	reg := prometheus.NewRegistry()
	h := NewHub(cfg, reg)
	all, ns, slow := subscribe(t, h, "", "a"), subscribe(t, h, "a", "a"), subscribe(t, h, "", "b")
	h.Publish([]engine.Decision{decision("a", 1), decision("b", 2)})
	if got := all.Take(nil); len(got) != 2 {
		t.Errorf("watcher of all namespaces has %d decisions, want 2", len(got))
	}
	if got := ns.Take(nil); len(got) != 1 || got[0].Target.Namespace != "a" {
		t.Errorf("watcher of namespace a has %v, want the one decision in a", got)
	}
	// all and ns keep up; slow never takes and passes its buffer.
	for i := range cfg.Buffer {
		h.Publish([]engine.Decision{decision("b", i)})
		all.Take(nil)
	}
	select {
	case <-slow.Dropped():
	default:
		t.Fatal("a watcher a whole buffer behind was not dropped")
	}
	if got := slow.Take(nil); len(got) != 0 {
		t.Errorf("a dropped watcher still holds %d decisions, want its queue freed", len(got))
	}
	select {
	case <-all.Dropped():
		t.Fatal("a watcher that keeps up was dropped")
	case <-ns.Dropped():
		t.Fatal("a watcher of another namespace was dropped")
	default:
	}
	if got := gathered.Sum(t, reg, "tidal_decider_watchers_dropped_total", ""); got != 1 {
		t.Errorf("dropped watchers counted %v, want 1", got)
	}
	// A dropped watcher keeps its place until its stream unsubscribes.
	if got := h.Len(); got != 3 {
		t.Errorf("Len = %d, want 3", got)
	}
	for _, w := range []*Watcher{all, ns, slow} {
		h.Unsubscribe(w)
	}
	if got := h.Len(); got != 0 {
		t.Errorf("Len after unsubscribing all = %d, want 0", got)
	}
}

func TestHubBoundsWatchers(t *testing.T) {
	cfg := defaults(t)
	cfg.MaxWatchers, cfg.MaxPerCaller = 3, 2
	reg := prometheus.NewRegistry()
	h := NewHub(cfg, reg)
	a1, a2 := subscribe(t, h, "", "a"), subscribe(t, h, "", "a")
	if _, err := h.Subscribe("", "a"); !errors.Is(err, ErrTooManyForCaller) {
		t.Errorf("a caller's third watcher: %v, want ErrTooManyForCaller", err)
	}
	b1 := subscribe(t, h, "", "b")
	if _, err := h.Subscribe("", "c"); !errors.Is(err, ErrTooManyWatchers) {
		t.Errorf("the decider's fourth watcher: %v, want ErrTooManyWatchers", err)
	}
	if got := gathered.Sum(t, reg, "tidal_decider_watch_refused_total", "caller-limit"); got != 1 {
		t.Errorf("caller-limit refusals counted %v, want 1", got)
	}
	if got := gathered.Sum(t, reg, "tidal_decider_watch_refused_total", "server-limit"); got != 1 {
		t.Errorf("server-limit refusals counted %v, want 1", got)
	}
	h.Unsubscribe(a1)
	a3 := subscribe(t, h, "", "a") // the freed place
	for _, w := range []*Watcher{a2, a3, b1} {
		h.Unsubscribe(w)
	}
}

// TestSilentWatchersDoNotDelayOthers: watchers that never read cost
// Publish nothing but their drop, and a watcher that reads gets every
// decision, in order, at once, while they sit. A Publish that waited for a
// silent watcher would hang here.
func TestSilentWatchersDoNotDelayOthers(t *testing.T) {
	cfg := defaults(t)
	cfg.Buffer = 16
	cfg.MaxWatchers, cfg.MaxPerCaller = 1001, 1000
	h := NewHub(cfg, prometheus.NewRegistry())
	silent := make([]*Watcher, 1000)
	for i := range silent {
		silent[i] = subscribe(t, h, "", "silent")
	}
	reader := subscribe(t, h, "", "reader")
	const batches, perBatch = 200, 10
	var got, buf []engine.Decision
	for b := range batches {
		ds := make([]engine.Decision, perBatch)
		for i := range ds {
			ds[i] = decision("a", b*perBatch+i)
		}
		h.Publish(ds)
		select {
		case <-reader.Ready():
		default:
			t.Fatalf("batch %d: the reader has nothing ready right after Publish", b)
		}
		buf = reader.Take(buf)
		got = append(got, buf...)
	}
	if len(got) != batches*perBatch {
		t.Fatalf("reader got %d decisions, want %d", len(got), batches*perBatch)
	}
	for i, d := range got {
		if d.Desired != int32(i) {
			t.Fatalf("reader's decision %d is %d: out of order", i, d.Desired)
		}
	}
	select {
	case <-reader.Dropped():
		t.Fatal("the reader was dropped")
	default:
	}
	for i, w := range silent {
		select {
		case <-w.Dropped():
		default:
			t.Fatalf("silent watcher %d was not dropped", i)
		}
		h.Unsubscribe(w)
	}
	h.Unsubscribe(reader)
}
