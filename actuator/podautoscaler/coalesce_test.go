package podautoscaler

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/test/cluster"
)

// TestCoalescedReports: with Leases (an ownership) and a status interval,
// a decision that changes the target costs its scale write alone, one that
// changes nothing costs nothing, the status write that reports them comes
// once the interval has passed, with the newest state, and a Scaled Event
// reports each change of direction. The stale-decision check follows what
// was applied, written or not; a change of ownership makes the next scale
// write wait for a status write again, and has what was applied written,
// as FlushPending does before buckets go.
func TestCoalescedReports(t *testing.T) {
	const interval = time.Second
	reqs := &requests{n: map[string]int{}}
	all := &requests{n: map[string]int{}, all: true}
	owner := controller.OwnerFunc(func(string) (string, bool) { return "actuator-a:9003", true })
	c := cluster.Shared(t)
	h := startHarness(t, c, c.Namespace(t), harnessOpts{
		owner:  owner,
		mutate: func(c *Config) { c.StatusInterval = interval },
		wrap:   func(rt http.RoundTripper) http.RoundTripper { return all.wrap(reqs.wrap(rt)) },
	})
	h.reconciledWeb()
	// Conditions settle first: a change of a condition is written at once.
	h.settledWeb()
	target := scale.Target{Namespace: h.ns, Name: "web"}
	ctx := context.WithValue(context.Background(), callTag{}, true)
	call := func(seq uint64, desired int32) scale.Result {
		t.Helper()
		res, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: target, Desired: desired, Sequence: seq, Reason: "stable: test"}})
		if err != nil {
			t.Fatalf("Scale(%d, %d): %v", seq, desired, err)
		}
		return res
	}
	reqs.take()
	all.take()

	if res := call(1000, 3); !res.Changed || res.Applied != 3 {
		t.Fatalf("Scale to 3 = %+v, want changed to 3", res)
	}
	if res := call(2000, 5); !res.Changed || res.Applied != 5 {
		t.Fatalf("Scale to 5 = %+v, want changed to 5", res)
	}
	// Applied, not written yet: the decision is served, and an older one
	// is stale.
	if st, err := h.ctrl.Status(context.Background(), target); err != nil || st.LastSequence != 2000 {
		t.Errorf("Status = %+v, %v; want sequence 2000", st, err)
	}
	if res := call(1500, 9); !res.Stale || res.LastSequence != 2000 || h.replicas("web") != 5 {
		t.Errorf("an older decision = %+v, replicas %d; want stale, 5 kept", res, h.replicas("web"))
	}
	if res := call(3000, 5); res.Changed || res.LastSequence != 3000 {
		t.Errorf("a newer decision, same count = %+v; want unchanged, sequence 3000", res)
	}
	if res := call(4000, 2); !res.Changed || res.Applied != 2 {
		t.Fatalf("Scale to 2 = %+v, want changed to 2", res)
	}
	want := map[string]int{"PATCH deployments/scale": 3}
	if got := reqs.take(); !maps.Equal(got, want) {
		t.Errorf("requests of three changes and two decisions that change nothing = %v, want %v", got, want)
	}
	// One Event up, one down.
	h.waitEvent("web", EventScaled, "stable: 5 → 2, test")
	if got := h.events("web", EventScaled); len(got) != 2 || got[0] != "stable: 1 → 3, test" {
		t.Errorf("Scaled Events = %q, want 1 → 3 and 5 → 2", got)
	}
	if d := h.get("web").Status.LastDecision; d != nil && d.Sequence >= 1000 {
		t.Errorf("status.lastDecision = %+v before the interval passed; want none of the test's", d)
	}

	// The interval passes: one write reports the newest state.
	h.clock.SetTime(h.clock.Now().Add(2 * interval))
	h.eventually("status written", func() bool {
		pa := h.get("web")
		d := pa.Status.LastDecision
		return d != nil && d.Sequence == 4000 && pa.Status.DesiredScale != nil && *pa.Status.DesiredScale == 2
	})
	if n := all.take()["PUT podautoscalers/status"]; n != 1 {
		t.Errorf("status writes once the interval passed = %d, want 1", n)
	}

	// After a change of ownership the next change is recorded first.
	h.readyPods("web", 2)
	h.clock.SetTime(h.clock.Now().Add(2 * interval))
	h.eventually("actualScale 2 written", func() bool {
		pa := h.get("web")
		return pa.Status.ActualScale != nil && *pa.Status.ActualScale == 2
	})
	h.ctrl.SetOwnership(owner)
	reqs.take()
	if res := call(5000, 4); !res.Changed || res.Applied != 4 {
		t.Fatalf("Scale to 4 = %+v, want changed to 4", res)
	}
	want = map[string]int{"PUT podautoscalers/status": 1, "PATCH deployments/scale": 1}
	if got := reqs.take(); !maps.Equal(got, want) {
		t.Errorf("requests of the first change after a change of ownership = %v, want %v", got, want)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 5000 {
		t.Errorf("status.lastDecision = %+v, want sequence 5000", d)
	}

	// A change applied and not written yet when ownership changes is
	// written then, not undone by the decision written last.
	if res := call(6000, 6); !res.Changed || res.Applied != 6 {
		t.Fatalf("Scale to 6 = %+v, want changed to 6", res)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 5000 {
		t.Fatalf("status.lastDecision = %+v before the interval passed, want sequence 5000", d)
	}
	h.ctrl.SetOwnership(owner)
	h.ctrl.Resync()
	h.eventually("decision 6000 written", func() bool {
		d := h.get("web").Status.LastDecision
		return d != nil && d.Sequence == 6000
	})
	if got := h.replicas("web"); got != 6 {
		t.Errorf("replicas = %d after a change of ownership, want 6", got)
	}

	// Before its buckets go, a replica writes what it kept.
	if res := call(7000, 3); !res.Changed || res.Applied != 3 {
		t.Fatalf("Scale to 3 = %+v, want changed to 3", res)
	}
	if err := h.ctrl.FlushPending(context.Background()); err != nil {
		t.Fatalf("FlushPending: %v", err)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 7000 {
		t.Errorf("status.lastDecision = %+v after FlushPending, want sequence 7000", d)
	}
}

// TestHeldTargetFirst: with Leases and no status interval, a replica that
// holds a PodAutoscaler (its own last status write, in this ownership
// epoch) scales the target before the status write that records the
// decision, so a wake from zero waits for one API write; the first change
// after a change of ownership records the decision first, as without
// Leases, so a late write of a former owner conflicts instead of undoing a
// newer decision.
func TestHeldTargetFirst(t *testing.T) {
	reqs := &requests{n: map[string]int{}}
	owner := controller.OwnerFunc(func(string) (string, bool) { return "actuator-a:9003", true })
	c := cluster.Shared(t)
	h := startHarness(t, c, c.Namespace(t), harnessOpts{
		owner: owner,
		wrap:  reqs.wrap,
	})
	h.reconciledWeb()
	h.settledWeb()
	target := scale.Target{Namespace: h.ns, Name: "web"}
	ctx := context.WithValue(context.Background(), callTag{}, true)
	call := func(seq uint64, desired int32) {
		t.Helper()
		res, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: target, Desired: desired, Sequence: seq, Reason: "stable: test"}})
		if err != nil || !res.Changed || res.Applied != desired {
			t.Fatalf("Scale(%d, %d) = %+v, %v; want changed to %d", seq, desired, res, err, desired)
		}
	}
	recordFirst := []string{"PUT podautoscalers/status", "PATCH deployments/scale"}
	targetFirst := []string{"PATCH deployments/scale", "PUT podautoscalers/status"}

	// The conditions' status writes above were this replica's, in this
	// epoch: it holds the PodAutoscaler.
	reqs.takeOrder()
	call(2000, 5)
	if got := reqs.takeOrder(); !slices.Equal(got, targetFirst) {
		t.Errorf("writes of a change of a held PodAutoscaler = %q, want %q", got, targetFirst)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 2000 || h.replicas("web") != 5 {
		t.Errorf("status.lastDecision = %+v, replicas %d; want sequence 2000 recorded at once, 5", d, h.replicas("web"))
	}
	h.ctrl.SetOwnership(owner)
	call(3000, 2)
	if got := reqs.takeOrder(); !slices.Equal(got, recordFirst) {
		t.Errorf("writes of the first change after a change of ownership = %q, want %q", got, recordFirst)
	}
	call(4000, 4)
	if got := reqs.takeOrder(); !slices.Equal(got, targetFirst) {
		t.Errorf("writes of the next change = %q, want %q", got, targetFirst)
	}
}

// settledWeb gives web a ready pod and waits for its conditions to settle
// (Active, ScaleTargetInitialized), each change of which is written at once.
func (h *harness) settledWeb() {
	h.t.Helper()
	h.readyPods("web", 1)
	h.eventually("Active and initialized", func() bool {
		pa, err := h.ctrl.current(cache.ObjectName{Namespace: h.ns, Name: "web"})
		return err == nil && condition(pa, autoscalingv1alpha1.PodAutoscalerConditionActive).Status == metav1.ConditionTrue &&
			condition(pa, autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized).Status == metav1.ConditionTrue
	})
}

// TestConflictAfterPatch: when the status write that follows the scale
// write of a held PodAutoscaler conflicts, the pass runs again and finds
// the target scaled already; the call still reports the change it made,
// from the replicas before it (it reported "unchanged, already there").
func TestConflictAfterPatch(t *testing.T) {
	owner := controller.OwnerFunc(func(string) (string, bool) { return "actuator-a:9003", true })
	var conflicts atomic.Int32
	conflicts.Store(1)
	c := cluster.Shared(t)
	h := startHarness(t, c, c.Namespace(t), harnessOpts{
		owner: owner,
		wrap: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Context().Value(callTag{}) != nil && req.Method == http.MethodPut &&
					strings.HasSuffix(req.URL.Path, "/status") && conflicts.Add(-1) >= 0 {
					body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"injected conflict"}`
					return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{"Content-Type": {"application/json"}},
						Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
				}
				return rt.RoundTrip(req)
			})
		},
	})
	h.reconciledWeb()
	h.settledWeb()
	before := h.replicas("web")
	ctx := context.WithValue(context.Background(), callTag{}, true)
	res, err := h.ctrl.Scale(ctx, Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "web"}, Desired: before + 3, Sequence: 2000, Reason: "stable: test"}})
	if conflicts.Load() >= 0 {
		t.Fatalf("no status write conflicted: the test did not reach the retry")
	}
	if err != nil || !res.Changed || res.Previous != before || res.Applied != before+3 {
		t.Errorf("Scale = %+v, %v; want %d → %d changed", res, err, before, before+3)
	}
	if got := h.replicas("web"); got != before+3 {
		t.Errorf("replicas %d, want %d", got, before+3)
	}
}
