package watch

import (
	"testing"

	"github.com/tidalscale/tidal/decider/engine"
)

func TestHubFiltersAndDropsSlowWatchers(t *testing.T) {
	h := NewHub()
	all, ns, slow := h.Subscribe(""), h.Subscribe("a"), h.Subscribe("")
	d := func(ns string) engine.Decision {
		return engine.Decision{Target: engine.Target{Namespace: ns, Name: "x"}}
	}
	h.Publish([]engine.Decision{d("a"), d("b")})
	if got := len(all.C()); got != 2 {
		t.Errorf("watcher of all namespaces has %d decisions, want 2", got)
	}
	if got := len(ns.C()); got != 1 {
		t.Errorf("watcher of namespace a has %d decisions, want 1", got)
	}
	// Drain the others; slow never reads and falls a buffer behind.
	for range Buffer {
		<-all.C()
		for len(all.C()) > 0 {
			<-all.C()
		}
		h.Publish([]engine.Decision{d("b")})
	}
	select {
	case <-slow.Dropped():
	default:
		t.Fatal("a watcher a whole buffer behind was not dropped")
	}
	select {
	case <-all.Dropped():
		t.Fatal("a watcher that keeps up was dropped")
	default:
	}
	h.Unsubscribe(all)
	h.Unsubscribe(ns)
}
