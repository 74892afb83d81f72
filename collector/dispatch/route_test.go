package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// TestDeciderOfIsTheStreamsOwner: DeciderOf names the decider a target's
// samples stream to, for targets the hub holds and for targets it does
// not (another collector replica's), and never a shadow.
func TestDeciderOfIsTheStreamsOwner(t *testing.T) {
	hub := New(Config{Retention: time.Minute, HighWater: 16, Shadows: []string{"shadow:1"}}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "held"}
	if _, ok := hub.DeciderOf(ref); ok {
		t.Error("DeciderOf with no deciders: ok, want false")
	}
	hub.setDeciders([]string{"a:1", "b:1", "c:1"})
	hub.SetSpec(&deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA}, time.Minute)
	owners := map[string]bool{}
	for i := range 64 {
		other := &commonv1.TargetRef{Namespace: "ns", Name: fmt.Sprintf("t%d", i)}
		a, ok := hub.DeciderOf(other)
		if !ok || a == "shadow:1" {
			t.Fatalf("DeciderOf(%s) = %q, %v", other.Key(), a, ok)
		}
		owners[a] = true
	}
	if len(owners) != 3 {
		t.Errorf("64 targets went to %d deciders, want all 3", len(owners))
	}
	hub.mu.Lock()
	want := hub.targets[keyOf(ref)].owner
	hub.mu.Unlock()
	if got, _ := hub.DeciderOf(ref); got != want {
		t.Errorf("DeciderOf(held) = %q, the hub streams it to %q", got, want)
	}
	// The owner moves with the member set, as the streams do.
	hub.setDeciders([]string{want})
	if got, _ := hub.DeciderOf(&commonv1.TargetRef{Namespace: "ns", Name: "t0"}); got != want {
		t.Errorf("with one decider, DeciderOf = %q, want %q", got, want)
	}
}
