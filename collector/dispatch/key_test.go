package dispatch

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// TestKindsAreSeparateTargets: a Deployment and a StatefulSet of one name
// are two targets of the hub (they used to share the namespace/name key, so
// removing one removed the other).
func TestKindsAreSeparateTargets(t *testing.T) {
	hub := New(Config{Retention: time.Minute, HighWater: 16}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	dep := &commonv1.TargetRef{Namespace: "ns", Name: "app"}
	sts := &commonv1.TargetRef{Namespace: "ns", Name: "app", ApiVersion: "apps/v1", Kind: "StatefulSet"}
	for _, ref := range []*commonv1.TargetRef{dep, sts} {
		hub.SetSpec(&deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA}, time.Minute)
	}
	hub.Remove(sts)
	if !hub.Known(dep) {
		t.Error("removing the StatefulSet removed the Deployment")
	}
	if hub.Known(sts) {
		t.Error("the StatefulSet is still known after its removal")
	}
}
