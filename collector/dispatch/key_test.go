package dispatch

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// TestRecordByRef: the hub finds a target by the ref its source records
// with, and that ref stays right when the target leaves and comes back
// (its samples go to the new one, none while it is gone); refs made anew
// for every sample do not grow the hub's memo past its bound.
func TestRecordByRef(t *testing.T) {
	hub := New(Config{Retention: time.Hour, HighWater: 16}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "app", ApiVersion: "apps/v1", Kind: "Deployment"}
	spec := &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA}
	at := time.Unix(1700000000, 0)
	sample := func(conc float64) *commonv1.MetricSample {
		at = at.Add(time.Second)
		return &commonv1.MetricSample{Time: timestamppb.New(at), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: conc}
	}
	concs := func() []float64 {
		t.Helper()
		w, ok := hub.Get(ref)
		if !ok {
			t.Fatal("target unknown")
		}
		var out []float64
		for _, s := range w.Samples {
			out = append(out, s.GetAverageConcurrency())
		}
		return out
	}

	hub.SetSpec(spec, 0)
	if !hub.Record(ref, sample(1)) {
		t.Fatal("a known target's sample was refused")
	}
	hub.Remove(ref)
	if hub.Record(ref, sample(2)) {
		t.Fatal("a removed target's sample was taken")
	}
	hub.SetSpec(spec, 0)
	if !hub.Record(ref, sample(3)) {
		t.Fatal("the target back was refused its sample")
	}
	if got := concs(); !slices.Equal(got, []float64{3}) {
		t.Errorf("samples of the target back %v, want [3]: none of its past life", got)
	}

	for i := range 100 {
		fresh := &commonv1.TargetRef{Namespace: "ns", Name: "app", ApiVersion: "apps/v1", Kind: "Deployment"}
		if !hub.Record(fresh, sample(float64(4+i))) {
			t.Fatal("a sample under an equal ref was refused")
		}
	}
	hub.mu.Lock()
	memo := len(hub.byRef)
	hub.mu.Unlock()
	if memo > 2 {
		t.Errorf("the memo holds %d refs for one target, want at most 2", memo)
	}
	if got := concs(); len(got) != 101 {
		t.Errorf("%d samples, want 101", len(got))
	}
}
