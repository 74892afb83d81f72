package podautoscaler

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
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
	// first is when the first change pending holds was made.
	first time.Time
	// quiet is set while pending holds only decisions that change nothing
	// a reader acts on (routine), with no write due.
	quiet bool
	// dir is the direction of the last change a Scaled Event reported:
	// 1 up, -1 down, 0 none yet.
	dir int
	// since is when this replica began to reconcile the PodAutoscaler;
	// decided is set once a decider's decision reached it since
	// (takeoverWait).
	since   time.Time
	decided bool
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
		rep = &report[P]{since: r.clock.Now()}
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
// Once pa is the cache's copy of this replica's last write, the report
// keeps that as its base. The caller holds name's lock.
func (r *Reconciler[P, C]) withPending(name cache.ObjectName, pa P) P {
	r.reportsMu.Lock()
	rep := r.reports[name]
	r.reportsMu.Unlock()
	var none P
	if rep == nil {
		return pa
	}
	if rep.base != none && rep.base != pa && rep.base.GetResourceVersion() == pa.GetResourceVersion() {
		// The cache has delivered this replica's last write: the base is
		// the cache's copy from now on, not a second one of each
		// PodAutoscaler for as long as it lives. Neither is ever changed.
		rep.base = pa
	}
	if r.spec.StatusInterval <= 0 || rep.pending == none {
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
func (r *Reconciler[P, C]) holds(rep *report[P], pa P) bool { return r.unheld(rep, pa) == "" }

// unheld says why this replica does not hold pa (holds): WriteEvery
// without a status interval and Leases, WriteFirst before its first status
// write since it last gained or lost PodAutoscalers, WriteOthers when pa is
// not its last write; "" when it holds pa.
func (r *Reconciler[P, C]) unheld(rep *report[P], pa P) string {
	var none P
	switch {
	case rep == nil || !r.Shared():
		return WriteEvery
	case rep.base == none || rep.epoch != r.epoch.Load():
		return WriteFirst
	case pa.GetResourceVersion() != rep.base.GetResourceVersion():
		return WriteOthers
	}
	return ""
}

// Why a status write was made (the label why of Spec.Status's writes).
const (
	// WriteDue: the changes this replica kept paused for the status
	// interval, or the longest wait passed.
	WriteDue = "due"
	// WriteUrgent: a condition turned, written at once.
	WriteUrgent = "urgent"
	// WriteForced: the status write that proves the copy current before
	// a scale write, by a replica that does not hold the PodAutoscaler.
	WriteForced = "forced"
	// WriteEvery: no status interval or no Leases, every change written.
	WriteEvery = "every"
	// WriteFirst: the replica's first write since it gained or lost
	// PodAutoscalers.
	WriteFirst = "first"
	// WriteOthers: the newest copy is not this replica's last write.
	WriteOthers = "others"
	// WriteFlush: what the replica kept, written before a handover.
	WriteFlush = "flush"
)

// StatusMetrics counts the status writes by why they were made, and the
// status fields whose change started each wait of a coalesced one: what an
// operator reads to tell what makes the writes. It also times how long
// Scale calls wait for their PodAutoscaler's lock, which a worker holds
// through a status write's round trip: what such writes cost the scale
// writes behind them.
type StatusMetrics struct {
	writes, waits *prometheus.CounterVec
	lockWait      *prometheus.HistogramVec
}

// NewStatusMetrics registers the status metrics (Spec.Status).
func NewStatusMetrics(reg prometheus.Registerer) *StatusMetrics {
	f := promauto.With(reg)
	return &StatusMetrics{
		writes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actuator_status_writes_total",
			Help: "PodAutoscaler status writes by kind and why they were made: due (the changes kept paused for --status-interval, or the longest wait passed), urgent (a condition turned), forced (before a scale write of a PodAutoscaler this replica does not hold), every (no coalescing), first (the first since this replica gained or lost PodAutoscalers), others (the newest copy is not this replica's write), flush (before a handover).",
		}, []string{"kind", "why"}),
		waits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actuator_status_waits_total",
			Help: "Coalesced PodAutoscaler status writes made due (each waits --status-interval for the changes to pause), by kind and each status field whose change started the wait; a field of lastDecision is named as lastDecision.<field>.",
		}, []string{"kind", "field"}),
		lockWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidal_actuator_scale_lock_wait_seconds",
			Help:    "How long a decider's Scale call waited for its PodAutoscaler's lock, by kind: another pass held it (a worker's status write or an earlier call at the API server).",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5},
		}, []string{"kind"}),
	}
}

// LockWait is the histogram of kind's Scale calls' waits for the lock.
func (m *StatusMetrics) LockWait(kind string) prometheus.Observer {
	return m.lockWait.WithLabelValues(kind)
}

// Writes is the count of status writes of kind for why.
func (m *StatusMetrics) Writes(kind, why string) prometheus.Counter {
	return m.writes.WithLabelValues(kind, why)
}

// Waits is the count of waits started by a change of field, of kind.
func (m *StatusMetrics) Waits(kind, field string) prometheus.Counter {
	return m.waits.WithLabelValues(kind, field)
}

func (r *Reconciler[P, C]) countWrite(why string) {
	if r.spec.Status != nil {
		r.spec.Status.Writes(r.spec.Name, why).Inc()
	}
}

// countWait counts, by field, the status change from pa to next that
// starts a coalesced write's wait.
func (r *Reconciler[P, C]) countWait(pa, next P) {
	if r.spec.Status == nil {
		return
	}
	for _, f := range statusFields(pa, next) {
		r.spec.Status.Waits(r.spec.Name, f).Inc()
	}
}

// statusFields names the status fields in which a and b differ: a field
// whose value is an object by its own fields that differ (lastDecision.
// desiredScale), any other as a whole. The names come from the kind's
// schema, so they are bounded.
func statusFields(a, b runtime.Object) []string {
	sa, sb := statusOf(a), statusOf(b)
	var out []string
	for _, k := range sets.List(sets.KeySet(sa).Union(sets.KeySet(sb))) {
		va, vb := sa[k], sb[k]
		if equality.Semantic.DeepEqual(va, vb) {
			continue
		}
		ma, oka := va.(map[string]any)
		mb, okb := vb.(map[string]any)
		if !oka || !okb {
			out = append(out, k)
			continue
		}
		for _, sub := range sets.List(sets.KeySet(ma).Union(sets.KeySet(mb))) {
			if !equality.Semantic.DeepEqual(ma[sub], mb[sub]) {
				out = append(out, k+"."+sub)
			}
		}
	}
	return out
}

// statusOf is o's status as unstructured data, nil when it has none.
func statusOf(o runtime.Object) map[string]any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil
	}
	st, _ := u["status"].(map[string]any)
	return st
}

// routine reports whether next's status differs from pa's only in the
// record of a decision that changes nothing a reader acts on: the same
// desired scale, prediction and sign of excess burst capacity as the one
// recorded, with a newer sequence, reason or keep-alive memory. A decider
// sends such a decision when one it made in between was superseded before
// it was sent (its send queue under load), or after a restart.
func (r *Reconciler[P, C]) routine(pa, next P) bool {
	a, b := r.kind.Decision(pa), r.kind.Decision(next)
	if a == nil || b == nil || a.DesiredScale != b.DesiredScale || a.PredictedIdle != b.PredictedIdle ||
		burstShort(a) != burstShort(b) {
		return false
	}
	return equality.Semantic.DeepEqual(r.kind.WithDecision(next, a), pa)
}

// burstShort reports whether d says its target cannot absorb a burst (a
// negative excess burst capacity), what Knative's rules read of it.
func burstShort(d *Decision) bool { return d.ExcessBurstCapacity != nil && *d.ExcessBurstCapacity < 0 }

// takeoverHold bounds how long a replica that took a PodAutoscaler over
// waits for a decider's decision before the rules may move its target
// from a status another replica may have left behind (takeoverWait):
// deciders send every target's last decision again within their
// --scale-refresh (30 s, and a tenth more) while no status records it, so
// one the replica before applied and did not record comes; keep that
// below it.
const takeoverHold = 45 * time.Second

// takeoverWait returns how long a pass that brings no decision of its own
// must leave pa's target as it is, 0 when it need not. Under
// Spec.StatusInterval the replica that owned pa before may have applied a
// decision it had not yet written when it stopped without a handover
// (FlushPending): the target has it, the status an older one, and the
// rules, which follow status, would undo it. So until a decider's
// decision reaches this replica (its resend of the one it saw applied
// included) or takeoverHold has passed since this replica began to
// reconcile pa, the target keeps what it has. A PodAutoscaler with no
// decision recorded has none to undo. The caller holds pa's lock.
func (r *Reconciler[P, C]) takeoverWait(rep *report[P], pa P, now time.Time) time.Duration {
	if rep == nil || rep.decided || r.spec.StatusInterval <= 0 || !r.Shared() || r.kind.Decision(pa) == nil {
		return 0
	}
	return max(0, rep.since.Add(takeoverHold).Sub(now))
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
	rep.pending, rep.quiet = none, false
	updated, err := r.kind.UpdateStatus(ctx, pending)
	if err != nil {
		return fmt.Errorf("update status of %s %s: %w", r.spec.Name, name, err)
	}
	r.remember(name, updated)
	r.countWrite(WriteFlush)
	rep.base = updated
	return nil
}
