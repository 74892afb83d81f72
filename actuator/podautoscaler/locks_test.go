package podautoscaler

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/test/testkit"
)

// TestKeyedLocks: one PodAutoscaler's lock never holds up another's (a
// pass waiting for the write budget holds its lock), the same one's does,
// and the map keeps only locks held or waited for.
func TestKeyedLocks(t *testing.T) {
	var k keyedLocks
	a, b := cache.ObjectName{Namespace: "ns", Name: "a"}, cache.ObjectName{Namespace: "ns", Name: "b"}
	unlockA := k.lock(a)
	took := make(chan func())
	go func() { took <- k.lock(b) }()
	unlockB := <-took // would block forever if b shared a's lock
	go func() { took <- k.lock(a) }()
	testkit.Eventually(t, 5*time.Second, "a second caller waiting for a", func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.locks[a].refs == 2
	})
	select {
	case u := <-took:
		u()
		t.Fatal("a's lock taken twice at once")
	default:
	}
	unlockB()
	unlockA()
	(<-took)() // the waiter gets a once it is free
	if n := len(k.locks); n != 0 {
		t.Errorf("%d locks kept with none held", n)
	}
}
