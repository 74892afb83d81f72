package podautoscaler

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
)

// report is what this replica keeps of a PodAutoscaler to coalesce the
// writes that report its changes (Spec.StatusInterval).
type report[P any] struct {
	// base is this replica's last status write, as the API server
	// returned it, made in ownership epoch epoch; the zero P before one.
	base  P
	epoch uint64
	// pending, when set, is the copy whose status this replica means to
	// write at due: base, or the newest copy when only others' writes of
	// what is not status came since, with the status its passes made.
	// Reads see it (current), so the rules and the stale-decision check
	// follow what was applied, not what was written.
	pending P
	due     time.Time
	// dir is the direction of the last change a Scaled Event reported:
	// 1 up, -1 down, 0 none yet.
	dir int
}

// reportOf returns name's report, made on first use; nil without
// Spec.StatusInterval and without Leases (nothing to coalesce, and no
// replica holds a PodAutoscaler alone). The caller holds name's lock.
func (r *Reconciler[P, C]) reportOf(name cache.ObjectName) *report[P] {
	if r.spec.StatusInterval <= 0 && !r.Shared() {
		return nil
	}
	r.reportsMu.Lock()
	defer r.reportsMu.Unlock()
	rep, ok := r.reports[name]
	if !ok {
		rep = &report[P]{}
		r.reports[name] = rep
	}
	return rep
}

// forget drops name's report: it left the cache, or another replica
// reconciles it. What it had not written is the new owner's to write.
func (r *Reconciler[P, C]) forget(name cache.ObjectName) {
	r.reportsMu.Lock()
	delete(r.reports, name)
	r.reportsMu.Unlock()
}

// withPending returns the copy a pass reads: pa, the newest copy this
// process knows, or the status this replica kept for it, not written yet.
// The caller holds name's lock.
func (r *Reconciler[P, C]) withPending(name cache.ObjectName, pa P) P {
	if r.spec.StatusInterval <= 0 {
		return pa
	}
	r.reportsMu.Lock()
	rep := r.reports[name]
	r.reportsMu.Unlock()
	var none P
	if rep == nil || rep.pending == none {
		return pa
	}
	// After a change of ownership the pending status stays: it is what
	// this replica applied, and its next write, no longer held (holds), is
	// made at once at the resourceVersion of its last one, which conflicts
	// if another replica wrote since. Dropping it would have the rules
	// follow the older decision written last, and undo the newer one.
	switch {
	case rep.pending.GetResourceVersion() == pa.GetResourceVersion():
		return rep.pending
	case rep.base != none && equality.Semantic.DeepEqual(r.kind.WithStatus(pa, rep.base), pa):
		// Others wrote its spec or metadata, not its status: the pending
		// status goes on the newest copy, and is written at once (holds
		// fails: pa is not this replica's write).
		rep.pending = r.kind.WithStatus(pa, rep.pending)
		return rep.pending
	default:
		// Someone else wrote its status; the next pass starts from it.
		rep.pending = none
		return pa
	}
}

// holds reports whether this replica may leave pa's status unwritten for
// a while (with Spec.StatusInterval), and scale its target before the
// status write that records the decision: replicas
// share PodAutoscalers through Leases, so no other replica writes it while
// this one owns it, and pa, the newest copy this process knows, is this
// replica's own last status write, made since it last gained or lost
// PodAutoscalers. A replica that gains one writes its status first
// (forced, before any scale write): a former owner that has not noticed
// its loss yet finds its own next write in conflict, as before.
//
// Without Leases, replicas that share a PodAutoscaler meet only in its
// status, so every decision is recorded there before it is applied.
func (r *Reconciler[P, C]) holds(rep *report[P], pa P) bool {
	var none P
	return r.Shared() && rep.base != none && rep.epoch == r.epoch.Load() &&
		pa.GetResourceVersion() == rep.base.GetResourceVersion()
}

// turned reports whether a change of the target by delta must be reported
// by a Scaled Event: every change, or with Spec.StatusInterval only the
// first of each direction, so that a target moving up and down by steps
// costs an Event per turn, not per step. The caller holds name's lock.
func (r *Reconciler[P, C]) turned(name cache.ObjectName, delta int32) bool {
	if r.spec.StatusInterval <= 0 {
		return true
	}
	rep := r.reportOf(name)
	dir := 1
	if delta < 0 {
		dir = -1
	}
	if rep.dir == dir {
		return false
	}
	rep.dir = dir
	return true
}

// ConditionsTurned reports whether the conditions b differ from a in a
// condition's presence or status; of says what identifies a condition and
// its status.
func ConditionsTurned[T any](a, b []T, of func(T) (typ, status string)) bool {
	if len(a) != len(b) {
		return true
	}
	was := make(map[string]string, len(a))
	for _, c := range a {
		t, s := of(c)
		was[t] = s
	}
	for _, c := range b {
		t, s := of(c)
		if old, ok := was[t]; !ok || old != s {
			return true
		}
	}
	return false
}

// FlushPending writes every status this replica kept and has not written,
// at once: before its buckets go to another replica, which would otherwise
// start from the older status written last and undo what this one applied
// (the decider sends a decision only when it changes). A write that
// conflicts (another replica wrote since) is dropped. It returns the first
// error.
func (r *Reconciler[P, C]) FlushPending(ctx context.Context) error {
	if r.spec.StatusInterval <= 0 {
		return nil
	}
	r.reportsMu.Lock()
	names := make([]cache.ObjectName, 0, len(r.reports))
	for name := range r.reports {
		names = append(names, name)
	}
	r.reportsMu.Unlock()
	var first error
	for _, name := range names {
		if err := r.flush(ctx, name); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flush writes name's pending status, if any.
func (r *Reconciler[P, C]) flush(ctx context.Context, name cache.ObjectName) error {
	unlock := r.lock(name)
	defer unlock()
	r.reportsMu.Lock()
	rep := r.reports[name]
	r.reportsMu.Unlock()
	var none P
	if rep == nil || rep.pending == none {
		return nil
	}
	pending := rep.pending
	rep.pending = none
	updated, err := r.kind.UpdateStatus(ctx, pending)
	if err != nil {
		return fmt.Errorf("update status of %s %s: %w", r.spec.Name, name, err)
	}
	r.written.Put(name, updated.GetResourceVersion(), updated)
	rep.base = updated
	return nil
}
