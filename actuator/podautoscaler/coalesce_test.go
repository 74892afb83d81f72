package podautoscaler

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/test/cluster"
)

// ownsAll is the ownership of a replica that holds every PodAutoscaler
// under the Leases.
var ownsAll = controller.OwnerFunc(func(string) (string, bool) { return "actuator-a:9003", true })

// coalescing starts a harness whose replica holds every PodAutoscaler and
// coalesces status writes over interval, with "web" reconciled and its
// conditions settled (a change of a condition is written at once); wrap,
// when set, wraps its transport; also, when set, changes its Config more.
func coalescing(t *testing.T, interval time.Duration, wrap func(http.RoundTripper) http.RoundTripper, also ...func(*Config)) *harness {
	t.Helper()
	c := cluster.Shared(t)
	h := startHarness(t, c, c.Namespace(t), harnessOpts{
		owner: ownsAll,
		mutate: func(c *Config) {
			c.StatusInterval = interval
			for _, f := range also {
				f(c)
			}
		},
		wrap: wrap,
	})
	h.reconciledWeb()
	h.settledWeb()
	return h
}

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
	owner := ownsAll
	writes := NewStatusMetrics(prometheus.NewRegistry())
	h := coalescing(t, interval, func(rt http.RoundTripper) http.RoundTripper { return all.wrap(reqs.wrap(rt)) },
		func(c *Config) { c.Status = writes })
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
	settled := statusWritesBy(t, writes)

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
	h.clock.SetTime(h.clock.Now().Add(statusDebounce * interval))
	h.eventually("status written", func() bool {
		pa := h.get("web")
		d := pa.Status.LastDecision
		return d != nil && d.Sequence == 4000 && pa.Status.DesiredScale != nil && *pa.Status.DesiredScale == 2
	})
	if n := all.take()["PUT podautoscalers/status"]; n != 1 {
		t.Errorf("status writes once the interval passed = %d, want 1; by why since the harness settled: %v", n, diffWrites(statusWritesBy(t, writes), settled))
	}

	// After a change of ownership the next change is recorded first.
	h.readyPods("web", 2)
	h.clock.SetTime(h.clock.Now().Add(statusDebounce * interval))
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
	stored := h.get("web")
	if d := stored.Status.LastDecision; d == nil || d.Sequence != 7000 {
		t.Errorf("status.lastDecision = %+v after FlushPending, want sequence 7000", d)
	}

	// What the replica keeps of its last write (the report's base, for as
	// long as the PodAutoscaler lives) goes without the managed fields the
	// API server returned with it, as the informer's copies do; once the
	// cache has that write, the base is the cache's copy, not a second one.
	if len(stored.ManagedFields) == 0 {
		t.Fatal("the API server returned no managed fields: the check below proves nothing")
	}
	name := cache.ObjectName{Namespace: h.ns, Name: "web"}
	base := func() *autoscalingv1alpha1.PodAutoscaler {
		unlock := h.ctrl.lock(name)
		defer unlock()
		if _, err := h.ctrl.current(name); err != nil {
			t.Fatal(err)
		}
		return h.ctrl.reportOf(name).base
	}
	if b := base(); b == nil || b.ResourceVersion != stored.ResourceVersion {
		t.Errorf("the report's base = %v, want the flush's copy at resourceVersion %s", b, stored.ResourceVersion)
	} else if len(b.ManagedFields) != 0 {
		t.Errorf("the report's base keeps %d managed fields entries, want none", len(b.ManagedFields))
	}
	h.eventually("the cache has the flush's write", func() bool {
		pa, err := h.ctrl.kind.Get(name)
		return err == nil && pa != nil && pa.ResourceVersion == stored.ResourceVersion
	})
	cached, err := h.ctrl.kind.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if b := base(); b != cached {
		t.Errorf("the report's base after the cache caught up = %p, want the cache's copy %p", b, cached)
	}
}

// TestScaleLockWait: a Scale call that finds its PodAutoscaler's lock held
// (a worker's status write at the API server) waits for it, and the wait
// is timed, so an operator can tell what status writes cost the scale
// writes behind them.
func TestScaleLockWait(t *testing.T) {
	writes := NewStatusMetrics(prometheus.NewRegistry())
	h := coalescing(t, time.Second, nil, func(c *Config) { c.Status = writes })
	name := cache.ObjectName{Namespace: h.ns, Name: "web"}
	waits := func() (uint64, float64) {
		t.Helper()
		var m dto.Metric
		if err := writes.LockWait("podautoscaler").(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	n0, sum0 := waits()

	const held = 200 * time.Millisecond
	unlock := h.ctrl.lock(name)
	done := make(chan error, 1)
	go func() {
		_, err := h.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{
			Target: scale.Target{Namespace: h.ns, Name: "web"}, Desired: 3, Sequence: 1000, Reason: "stable: test"}})
		done <- err
	}()
	// Released only once the call waits for it: the holder and the call.
	h.eventually("the Scale call waits for the lock", func() bool {
		h.ctrl.locks.mu.Lock()
		defer h.ctrl.locks.mu.Unlock()
		l := h.ctrl.locks.locks[name]
		return l != nil && l.refs == 2
	})
	time.Sleep(held)
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("Scale: %v", err)
	}
	if n, sum := waits(); n != n0+1 || sum-sum0 < held.Seconds() {
		t.Errorf("lock waits timed = %d (%.3f s), want one more, of at least %s", n-n0, sum-sum0, held)
	}
}

// TestStatusWaitsForPause: changes that come less than an interval apart
// (a target stepped a tick at a time) are reported by one status write
// once they pause, but no later than statusDebounce intervals after the
// first; a change on its own is written an interval after it. The
// shared cluster makes the target's pods, whose readiness is a change too.
func TestStatusWaitsForPause(t *testing.T) {
	const interval = time.Second
	all := &requests{n: map[string]int{}, all: true}
	writes := NewStatusMetrics(prometheus.NewRegistry())
	h := coalescing(t, interval, all.wrap, func(c *Config) { c.Status = writes })
	name := cache.ObjectName{Namespace: h.ns, Name: "web"}
	start := h.clock.Now()
	at := func(d time.Duration) { h.clock.SetTime(start.Add(d)) }
	call := func(seq uint64, desired int32) {
		t.Helper()
		res, err := h.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "web"},
			Desired: desired, Sequence: seq, Reason: "stable: test"}})
		if err != nil || !res.Changed {
			t.Fatalf("Scale(%d, %d) = %+v, %v; want changed", seq, desired, res, err)
		}
	}
	pass := func() {
		t.Helper()
		if _, err := h.ctrl.Sync(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	statusWrites := func() int { return all.take()["PUT podautoscalers/status"] }
	settled := statusWritesBy(t, writes) // the counts once the harness settled
	recorded := func() int64 {
		if d := h.get("web").Status.LastDecision; d != nil {
			return d.Sequence
		}
		return 0
	}
	all.take()

	// Five steps 0.6 intervals apart: each keeps the write waiting, up to
	// three intervals after the first.
	for i := range 5 {
		at(time.Duration(i) * 6 * interval / 10)
		call(uint64(1000*(i+1)), int32(2+i))
		pass()
	}
	if n := statusWrites(); n != 0 {
		t.Errorf("status writes while changes come 0.6 intervals apart = %d, want 0", n)
	}
	// The first step started the wait: the target's first decision.
	var started dto.Metric
	if err := writes.Waits("podautoscaler", "lastDecision").Write(&started); err != nil || started.GetCounter().GetValue() != 1 {
		t.Errorf("waits started by lastDecision = %v (%v), want 1", started.GetCounter().GetValue(), err)
	}
	at(statusDebounce*interval - time.Millisecond)
	pass()
	if n := statusWrites(); n != 0 {
		t.Errorf("status writes just before %d intervals = %d, want 0", statusDebounce, n)
	}
	at(statusDebounce * interval)
	pass()
	// Pods still coming up may be reported by a write of their own.
	if n, seq := statusWrites(), recorded(); n < 1 || seq != 5000 {
		t.Errorf("status writes at %d intervals = %d recording %d, want one recording the last of the five (5000)", statusDebounce, n, seq)
	}

	// The pods of the last step come up (worker passes report them), and
	// their write goes.
	h.eventually("6 ready pods reported", func() bool {
		pa, err := h.ctrl.current(name)
		return err == nil && pa.Status.ActualScale != nil && *pa.Status.ActualScale == 6
	})
	at(2 * statusDebounce * interval)
	pass()
	statusWrites()

	// A change on its own, a pod less: written once the pod went and an
	// interval passed after it (the clock stands still meanwhile).
	later := 10 * interval
	at(later)
	call(6000, 5)
	h.eventually("5 ready pods reported", func() bool {
		pa, err := h.ctrl.current(name)
		return err == nil && pa.Status.ActualScale != nil && *pa.Status.ActualScale == 5
	})
	at(later + interval - time.Millisecond)
	pass()
	if n := statusWrites(); n != 0 {
		t.Errorf("status writes before an interval passed = %d, want 0", n)
	}
	at(later + interval)
	pass()
	if n, seq := statusWrites(), recorded(); n != 1 || seq != 6000 {
		t.Errorf("status writes an interval after a lone change = %d recording %d, want 1 recording 6000", n, seq)
	}
	// Every write since the harness settled came due, or at once for a
	// condition that turned (the shared cluster's pods may flap).
	since := diffWrites(statusWritesBy(t, writes), settled)
	for _, why := range []string{WriteForced, WriteEvery, WriteFirst, WriteOthers, WriteFlush} {
		if n := since[why]; n != 0 {
			t.Errorf("status writes counted %s = %v, want 0", why, n)
		}
	}
	if n := since[WriteDue]; n < 2 {
		t.Errorf("status writes counted due = %v, want at least the two the test waited for", n)
	}
}

// TestRoutineDecisionsKept: under Leases and a status interval, a decision
// that changes nothing a reader acts on (the count recorded, a newer
// sequence) is kept, not written, even once the interval has passed; it
// still makes older decisions stale, and the next change's write, or the
// handover's, records it.
func TestRoutineDecisionsKept(t *testing.T) {
	const interval = time.Second
	all := &requests{n: map[string]int{}, all: true}
	h := coalescing(t, interval, all.wrap)
	target := scale.Target{Namespace: h.ns, Name: "web"}
	call := func(seq uint64, desired int32) scale.Result {
		t.Helper()
		res, err := h.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{Target: target, Desired: desired, Sequence: seq, Reason: fmt.Sprintf("stable: test %d", seq)}})
		if err != nil {
			t.Fatalf("Scale(%d, %d): %v", seq, desired, err)
		}
		return res
	}
	recorded := func(seq int64) func() bool {
		return func() bool { d := h.get("web").Status.LastDecision; return d != nil && d.Sequence == seq }
	}
	call(1000, 1) // the count it has
	h.clock.SetTime(h.clock.Now().Add(statusDebounce * interval))
	h.eventually("decision 1000 written", recorded(1000))
	all.take()

	for seq := uint64(2000); seq <= 4000; seq += 1000 {
		if res := call(seq, 1); res.Changed || res.Stale {
			t.Fatalf("Scale(%d, 1) = %+v, want unchanged", seq, res)
		}
		h.clock.SetTime(h.clock.Now().Add(statusDebounce * interval))
		h.ctrl.AddAfter(cache.ObjectName{Namespace: h.ns, Name: "web"}, 0)
	}
	// A worker pass has run since the last interval passed.
	h.readyPods("web", 1)
	if _, err := h.ctrl.Sync(context.Background(), cache.ObjectName{Namespace: h.ns, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if got := all.take(); len(got) != 0 {
		t.Errorf("requests of three decisions that change nothing = %v, want none", got)
	}
	if res := call(3500, 4); !res.Stale || res.LastSequence != 4000 {
		t.Errorf("a decision older than the kept one = %+v, want stale, last 4000", res)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 1000 {
		t.Errorf("status.lastDecision = %+v, want 1000 still", d)
	}

	// The next change is written with everything kept.
	if res := call(5000, 3); !res.Changed || res.Applied != 3 {
		t.Fatalf("Scale to 3 = %+v, want changed", res)
	}
	h.clock.SetTime(h.clock.Now().Add(statusDebounce * interval))
	h.eventually("decision 5000 written", recorded(5000))

	// A handover writes a kept decision.
	call(6000, 3)
	if err := h.ctrl.FlushPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := h.get("web").Status.LastDecision; d == nil || d.Sequence != 6000 {
		t.Errorf("status.lastDecision = %+v after FlushPending, want 6000", d)
	}
}

// TestTakeoverWaitsForDecider: a replica that took a PodAutoscaler over
// from one that stopped without writing what it applied leaves the target
// as it is, not as the older status says, until a decider's decision
// reaches it or takeoverHold has passed.
func TestTakeoverWaitsForDecider(t *testing.T) {
	const interval = time.Second
	a := coalescing(t, interval, nil)
	c, ns := a.c, a.ns
	opts := harnessOpts{owner: ownsAll, mutate: func(c *Config) { c.StatusInterval = interval }}
	target := scale.Target{Namespace: ns, Name: "web"}
	call := func(h *harness, seq uint64, desired int32) {
		t.Helper()
		res, err := h.ctrl.Scale(context.Background(), Request{Decision: scale.Decision{Target: target, Desired: desired, Sequence: seq, Reason: "stable: test"}})
		if err != nil || res.Stale {
			t.Fatalf("Scale(%d, %d) = %+v, %v", seq, desired, res, err)
		}
	}
	call(a, 1000, 3)
	a.clock.SetTime(a.clock.Now().Add(statusDebounce * interval))
	a.eventually("decision 1000 written", func() bool {
		d := a.get("web").Status.LastDecision
		return d != nil && d.Sequence == 1000
	})
	call(a, 2000, 5)
	a.stop() // applied 5, recorded 3: a crash before the status write

	b := startHarness(t, c, ns, opts)
	name := cache.ObjectName{Namespace: ns, Name: "web"}
	b.eventually("the new owner's cache has 5 replicas", func() bool {
		n, ok := b.ctrl.scaler.(cachedReplicas).CachedReplicas(target)
		return ok && n == 5
	})
	out, err := b.ctrl.Sync(context.Background(), name)
	if err != nil || out.Patched || out.Requeue <= 0 || out.Requeue > takeoverHold {
		t.Fatalf("the new owner's first pass = %+v, %v; want no scale write, a pass again within %s", out, err, takeoverHold)
	}
	if got := b.replicas("web"); got != 5 {
		t.Fatalf("replicas = %d after the new owner's first pass, want the 5 applied kept", got)
	}
	// The decider sends the decision it saw applied again: the wait ends.
	call(b, 2000, 5)
	b.clock.SetTime(b.clock.Now().Add(statusDebounce * interval))
	b.eventually("decision 2000 written", func() bool {
		d := b.get("web").Status.LastDecision
		return d != nil && d.Sequence == 2000
	})
	if out, err := b.ctrl.Sync(context.Background(), name); err != nil || out.Patched || b.replicas("web") != 5 {
		t.Errorf("a pass after the decision = %+v, %v, replicas %d; want nothing to write, 5", out, err, b.replicas("web"))
	}

	// Without a decision, the rules follow status once takeoverHold has
	// passed.
	b.stop()
	c2 := startHarness(t, c, ns, opts)
	call(c2, 3000, 5)
	c2.clock.SetTime(c2.clock.Now().Add(statusDebounce * interval))
	// Hand over as a replica does before its buckets go: when c2's own
	// first pass wrote status before the call, 3000 changed nothing a
	// reader acts on (the scale stays 5) and was kept, not written.
	if err := c2.ctrl.FlushPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	c2.eventually("decision 3000 written", func() bool {
		d := c2.get("web").Status.LastDecision
		return d != nil && d.Sequence == 3000
	})
	c2.stop()
	if _, err := c.Client.AppsV1().Deployments(ns).UpdateScale(context.Background(), "web", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 7}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := startHarness(t, c, ns, opts)
	d.eventually("the new owner's cache has 7 replicas", func() bool {
		n, ok := d.ctrl.scaler.(cachedReplicas).CachedReplicas(target)
		return ok && n == 7
	})
	if out, err := d.ctrl.Sync(context.Background(), name); err != nil || out.Patched {
		t.Fatalf("first pass = %+v, %v; want no scale write yet", out, err)
	}
	d.clock.SetTime(d.clock.Now().Add(takeoverHold))
	if out, err := d.ctrl.Sync(context.Background(), name); err != nil || !out.Patched || d.replicas("web") != 5 {
		t.Errorf("a pass takeoverHold later = %+v, %v, replicas %d; want the recorded 5 applied", out, err, d.replicas("web"))
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
	owner := ownsAll
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
	owner := ownsAll
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

// statusWritesBy reads the status writes counted by why, of the
// podautoscaler kind.
func statusWritesBy(t *testing.T, writes *StatusMetrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, why := range []string{WriteDue, WriteUrgent, WriteForced, WriteEvery, WriteFirst, WriteOthers, WriteFlush} {
		var m dto.Metric
		if err := writes.Writes("podautoscaler", why).Write(&m); err != nil {
			t.Fatal(err)
		}
		out[why] = m.GetCounter().GetValue()
	}
	return out
}

// diffWrites is what now counts beyond before, by why, where it differs.
func diffWrites(now, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for why, n := range now {
		if d := n - before[why]; d != 0 {
			out[why] = d
		}
	}
	return out
}

func TestStatusFields(t *testing.T) {
	three, two, short := int32(3), int32(2), int32(-4)
	base := func() *autoscalingv1alpha1.PodAutoscaler {
		return &autoscalingv1alpha1.PodAutoscaler{Status: autoscalingv1alpha1.PodAutoscalerStatus{
			DesiredScale: &three, ActualScale: &three,
			LastDecision: &Decision{Sequence: 1000, DesiredScale: 3, Reason: "stable: a"},
		}}
	}
	for _, tc := range []struct {
		name   string
		change func(*autoscalingv1alpha1.PodAutoscaler)
		want   []string
	}{
		{"nothing", func(*autoscalingv1alpha1.PodAutoscaler) {}, nil},
		{"ready pods", func(pa *autoscalingv1alpha1.PodAutoscaler) { pa.Status.ActualScale = &two }, []string{"actualScale"}},
		{"decision fields", func(pa *autoscalingv1alpha1.PodAutoscaler) {
			pa.Status.LastDecision.Sequence, pa.Status.LastDecision.ExcessBurstCapacity = 2000, &short
		}, []string{"lastDecision.excessBurstCapacity", "lastDecision.sequence"}},
		{"first decision", func(pa *autoscalingv1alpha1.PodAutoscaler) { pa.Status.LastDecision = nil }, []string{"lastDecision"}},
		{"conditions", func(pa *autoscalingv1alpha1.PodAutoscaler) {
			pa.Status.Conditions = []metav1.Condition{{Type: "Active", Status: metav1.ConditionTrue}}
		}, []string{"conditions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := base()
			tc.change(next)
			if got := statusFields(base(), next); !slices.Equal(got, tc.want) {
				t.Errorf("statusFields = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDueAfter(t *testing.T) {
	const interval = time.Second
	first := time.Unix(1000, 0)
	r := &Reconciler[*autoscalingv1alpha1.PodAutoscaler, struct{}]{spec: Spec[*autoscalingv1alpha1.PodAutoscaler, struct{}]{Config: Config{StatusInterval: interval}}}
	for _, tc := range []struct {
		name            string
		at              time.Duration // after first
		desired, actual int32
		want            time.Duration // after first
	}{
		{"pods there: a pause of an interval", 0, 3, 3, interval},
		{"pods there, a later change: an interval after it", 1500 * time.Millisecond, 3, 3, 2500 * time.Millisecond},
		{"pods there, late in the wait: the longest wait", 2500 * time.Millisecond, 3, 3, statusDebounce * interval},
		{"pods coming: they are the next change", 0, 5, 3, statusDebounce * interval},
		{"pods going", 500 * time.Millisecond, 1, 3, statusDebounce * interval},
		{"no desired scale yet", 0, -1, 2, interval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &report[*autoscalingv1alpha1.PodAutoscaler]{first: first}
			p := &Pass[*autoscalingv1alpha1.PodAutoscaler, struct{}]{}
			p.Result.DesiredScale, p.Result.ActualScale = tc.desired, tc.actual
			if got := r.dueAfter(rep, p, first.Add(tc.at)); !got.Equal(first.Add(tc.want)) {
				t.Errorf("due %s after the first change, want %s", got.Sub(first), tc.want)
			}
		})
	}
}
