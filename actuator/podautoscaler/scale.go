package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
	"github.com/tidalscale/tidal/fairqueue"
)

// ErrNotSynced is returned before the reconciler's caches have synced.
var ErrNotSynced = errors.New("podautoscaler caches not synced yet")

// ErrInvalidPodAutoscaler is returned for a PodAutoscaler whose annotations
// do not parse; the error says which and why.
var ErrInvalidPodAutoscaler = errors.New("invalid podautoscaler")

// NotOwnerError is returned by Scale for a PodAutoscaler another actuator
// replica reconciles; the caller sends the decision there.
type NotOwnerError struct {
	PodAutoscaler cache.ObjectName
	// Owner is the owner's gRPC address; empty while no live replica holds
	// the PodAutoscaler's bucket.
	Owner string
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("podautoscaler %s: no actuator replica holds its bucket yet", e.PodAutoscaler)
	}
	return fmt.Sprintf("podautoscaler %s is reconciled by actuator %s", e.PodAutoscaler, e.Owner)
}

// Request is one decision to apply, as the deciders send it.
type Request struct {
	scale.Decision
	// ExcessBurstCapacity is the decider's, when known.
	ExcessBurstCapacity *int32
	// KeepAliveState is the decider's keep-alive memory of the target, to
	// record with the decision; PredictedIdle marks a 0 the policy
	// predicted (kpaspec.Status.PredictedIdle).
	KeepAliveState string
	PredictedIdle  bool
	// Class is the decider's class of the call (what it saw of the
	// target), used when this process knows the target's replicas neither
	// from its cache nor from a recorded decision; nil for none.
	Class *writebudget.Class
}

// podAutoscalerFor returns the PodAutoscaler this reconciler serves that
// scales t; the zero P when there is none. Before the caches have synced
// it returns ErrNotSynced: a target's rules are unknown, and no decision
// may take another path meanwhile.
func (r *Reconciler[P, C]) podAutoscalerFor(t scale.Target) (P, error) {
	var none P
	if !r.HasSynced() {
		return none, ErrNotSynced
	}
	key, err := targetKey(t)
	if err != nil {
		return none, err
	}
	objs, err := r.spec.Informer.GetIndexer().ByIndex(indexTarget, key)
	if err != nil {
		return none, err
	}
	return only[P](objs, t, r.spec.Name+"s")
}

// Handles reports whether a PodAutoscaler this reconciler serves scales t
// (ErrNotSynced before the caches have synced).
func (r *Reconciler[P, C]) Handles(t scale.Target) (bool, error) {
	pa, err := r.podAutoscalerFor(t)
	var none P
	return pa != none, err
}

// Scale applies a decider's decision. When a PodAutoscaler names the
// target, the decision is recorded in its status (refused if older than the
// one recorded) and the target goes through the rules; otherwise the
// Fallback applies it as is, with staleness tracked by this process only.
func (r *Reconciler[P, C]) Scale(ctx context.Context, req Request) (scale.Result, error) {
	pa, err := r.podAutoscalerFor(req.Target)
	if err != nil {
		return scale.Result{}, err
	}
	var none P
	if pa == none {
		if r.spec.Fallback != nil {
			return r.spec.Fallback.Apply(ctx, req.Decision)
		}
		return scale.Result{}, fmt.Errorf("target %s: no %s scales it: %w", req.Target, r.spec.Name, scale.ErrNotFound)
	}
	name := cache.MetaObjectToName(pa)
	rev, err := r.kind.Revision(pa)
	if err != nil {
		return scale.Result{}, fmt.Errorf("%s %s: %w: %w", r.spec.Name, name, ErrInvalidPodAutoscaler, err)
	}
	_, hi := rev.ScaleBounds()
	op, err := startOp(req.Decision, r.spec.Name, name, hi)
	if err != nil {
		return scale.Result{}, err
	}
	if owner, mine := r.Owns(name); !mine {
		return scale.Result{}, &NotOwnerError{PodAutoscaler: name, Owner: owner}
	}
	if r.spec.Claims != nil && !req.DryRun {
		// Taken before the lock: a pass waiting for the budget holds it,
		// and a newer decision must reach the claim to replace that pass.
		var release func()
		if ctx, release, err = r.claim(ctx, name, r.class(pa, req), req.Sequence); err != nil {
			return r.superseded(req, err)
		}
		defer release()
	}
	// Read before the call: a status this call writes is not yet in the
	// informer's copy, and one coalesced for later is not recorded yet.
	last := sequence(r.kind.Decision(pa))
	res, err := r.scale(ctx, req, name, op)
	if err != nil {
		return r.superseded(req, err)
	}
	res.Recorded = !req.DryRun && last > 0 && req.Sequence <= last
	return res, nil
}

// scale applies req to the PodAutoscaler name once the caller may write.
func (r *Reconciler[P, C]) scale(ctx context.Context, req Request, name cache.ObjectName, op *op) (scale.Result, error) {
	var none P
	start := time.Now()
	unlock := r.lock(name)
	defer unlock()
	if r.spec.Status != nil {
		r.spec.Status.LockWait(r.spec.Name).Observe(time.Since(start).Seconds())
	}

	op.stamp(req.ExcessBurstCapacity, req.KeepAliveState, req.PredictedIdle, r.clock.Now())
	// Each attempt compares with the newest copy this process knows; the
	// status write that records the decision is made at that copy's
	// resourceVersion, so a newer decision recorded elsewhere meanwhile
	// makes it conflict, and the next attempt, from a fresh read, finds
	// this one stale.
	out, cur, err := r.reconcileLatest(ctx, name, func(pa P) (*Decision, bool) {
		return op.attempt(r.kind.Decision(pa))
	}, req.DryRun)
	var on runtime.Object
	if cur != none {
		on = r.ref(cur)
	}
	res, err := op.finish(ctx, host{scaler: r.scaler, recorder: r.recorder, requeue: func(d time.Duration) { r.AddAfter(name, d) }}, out, err, on)
	if err != nil || res.Stale {
		return res, err
	}
	if rep := r.reportOf(name); rep != nil && !req.DryRun {
		// The decider's view is as new as the status now: the rules may
		// follow it (takeoverWait).
		rep.decided = true
	}
	// A dry run (the request's or the PodAutoscaler's) reports what the
	// target would have; a paused target keeps what it has.
	if out.Held != nil && (req.DryRun || !out.Paused) {
		res.Applied = *out.Held
	}
	return res, nil
}

// class is the write budget's class of req for pa: a wake when the target
// is at zero (as cached, else as last decided) and req asks for more, up
// when it asks for more, else down; the decider's class when neither tells.
func (r *Reconciler[P, C]) class(pa P, req Request) writebudget.Class {
	d := req.Decision
	cur, known := int32(0), false
	if c, ok := r.scaler.(cachedReplicas); ok {
		cur, known = c.CachedReplicas(d.Target)
	}
	if rec := r.kind.Decision(pa); !known && rec != nil {
		cur, known = rec.DesiredScale, true
	}
	return classOf(cur, known, req.Class, d.Desired)
}

// classOf is the class of asking for desired replicas a target that has
// cur (when known), the decider's class hint deciding when it is not.
func classOf(cur int32, known bool, hint *writebudget.Class, desired int32) writebudget.Class {
	if !known && hint != nil {
		return *hint
	}
	return fairqueue.Of(cur, known, desired)
}

// cachedReplicas is a scaler that knows some targets' replicas without an
// API request (scale.Cached).
type cachedReplicas interface {
	CachedReplicas(t scale.Target) (int32, bool)
}

// superseded turns err, when a newer decision replaced req before it was
// written, into the answer to a stale decision (the caller need not retry);
// other errors are returned as they are.
func (r *Reconciler[P, C]) superseded(req Request, err error) (scale.Result, error) {
	var se *writebudget.SupersededError
	if !errors.As(err, &se) {
		return scale.Result{}, err
	}
	res := scale.Result{Stale: true, LastSequence: max(se.Sequence, req.Sequence)}
	if c, ok := r.scaler.(cachedReplicas); ok {
		res.Applied, _ = c.CachedReplicas(req.Target)
		res.Previous = res.Applied
	}
	return res, nil
}

// Status is what is known about a target's scale.
func (r *Reconciler[P, C]) Status(ctx context.Context, t scale.Target) (scale.Status, error) {
	pa, err := r.podAutoscalerFor(t)
	if err != nil {
		return scale.Status{}, err
	}
	var none P
	if pa == none {
		if r.spec.Fallback != nil {
			return r.spec.Fallback.Get(ctx, t)
		}
		return scale.Status{}, fmt.Errorf("target %s: no %s scales it: %w", t, r.spec.Name, scale.ErrNotFound)
	}
	// The decision this replica applied may not be written yet.
	name := cache.MetaObjectToName(pa)
	unlock := r.lock(name)
	cur, err := r.current(name)
	unlock()
	if err != nil {
		return scale.Status{}, err
	}
	if cur != none {
		pa = cur
	}
	return targetStatus(ctx, r.scaler, t, r.kind.Decision(pa))
}
