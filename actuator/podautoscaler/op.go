package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/tidalscale/tidal/actuator/scale"
)

// ErrOutOfRange is returned for a decision the PodAutoscaler's bounds
// refuse outright (above its max-scale, or a sequence no status can hold).
var ErrOutOfRange = errors.New("desired scale out of range")

// EventStaleDecision is the reason of the Warning a stale decision gets.
const EventStaleDecision = "StaleDecision"

// scaleReader reads the scale of a target.
type scaleReader interface {
	GetScale(ctx context.Context, t scale.Target) (scale.Scale, error)
}

// op is one Scale call on a PodAutoscaler: a decision is checked against
// the PodAutoscaler's bounds, recorded in its status unless it is older
// than the decision recorded there (stale), and the call's result is made
// from the reconcile that applied it. startOp, then stamp, attempt (from
// each attempt to record the decision) and finish.
type op struct {
	req  scale.Decision
	what string // "podautoscaler ns/name", in errors
	dec  Decision
	// last and stale are the newest attempt's comparison.
	last  uint64
	stale bool
}

// startOp checks req against the PodAutoscaler name's max-scale (maxScale,
// 0 for none) and the range of a recorded sequence (status holds an
// int64, as Kubernetes integers are) and returns the call. kind names the
// PodAutoscaler in errors ("podautoscaler", "knative podautoscaler").
func startOp(req scale.Decision, kind string, name cache.ObjectName, maxScale int32) (*op, error) {
	what := kind + " " + name.String()
	if maxScale > 0 && req.Desired > maxScale {
		return nil, fmt.Errorf("desired_replicas %d for %s: %s has max-scale %d: %w", req.Desired, req.Target, what, maxScale, ErrOutOfRange)
	}
	if req.Sequence > math.MaxInt64 {
		return nil, fmt.Errorf("decision_sequence %d for %s: want at most %d (Unix milliseconds): %w",
			req.Sequence, req.Target, int64(math.MaxInt64), ErrOutOfRange)
	}
	return &op{req: req, what: what}, nil
}

// stamp makes the decision to record, made at now (once the caller holds
// the PodAutoscaler's lock), with the decider's excess burst capacity and
// its keep-alive policy's memory and prediction: recorded with the
// decision, they cost no write of their own.
func (o *op) stamp(excessBurstCapacity *int32, keepAliveState string, predictedIdle bool, now time.Time) {
	o.dec = Decision{Sequence: int64(o.req.Sequence), DesiredScale: o.req.Desired,
		ExcessBurstCapacity: excessBurstCapacity, Reason: o.req.Reason, Time: metav1.NewTime(now),
		KeepAliveState: keepAliveState, PredictedIdle: predictedIdle && o.req.Desired == 0}
}

// sequence is rec's sequence; 0 when none is recorded.
func sequence(rec *Decision) uint64 {
	if rec != nil && rec.Sequence > 0 {
		return uint64(rec.Sequence)
	}
	return 0
}

// attempt compares one attempt's copy of the PodAutoscaler with the
// request: rec is the decision recorded there (nil when none). It returns
// the decision to record, nil to converge only (this decision is recorded
// already), and done when the request is older than the recorded one:
// stale, nothing is reconciled.
func (o *op) attempt(rec *Decision) (dec *Decision, done bool) {
	o.last = sequence(rec)
	if o.stale = o.req.Sequence < o.last; o.stale {
		return nil, true
	}
	if !o.req.DryRun && rec != nil && o.req.Sequence == o.last && o.req.Desired == rec.DesiredScale {
		return nil, false // already recorded: converge only
	}
	return &o.dec, false
}

// host is what finish needs of the reconciler.
type host struct {
	scaler   scaleReader
	recorder record.EventRecorder
	// requeue queues a reconcile of the PodAutoscaler after d.
	requeue func(d time.Duration)
}

// finish makes the call's result from its reconcile (out, err) and the
// PodAutoscaler the last attempt read, on (nil, untyped, when it was
// deleted meanwhile; the object a stale decision's Warning is recorded
// on). The pass the rules ask for is queued first, as a worker's reconcile
// queues it: a decision of 0 is often the last event the PodAutoscaler
// gets, and without that pass it never reaches zero. A stale decision is
// refused with a Warning and the target's current replicas.
func (o *op) finish(ctx context.Context, h host, out Outcome, err error, on runtime.Object) (scale.Result, error) {
	if out.Requeue > 0 && !o.req.DryRun {
		h.requeue(out.Requeue)
	}
	if err != nil {
		return scale.Result{}, fmt.Errorf("%s: %w", o.what, err)
	}
	if on == nil {
		return scale.Result{}, fmt.Errorf("target %s: %s was deleted: %w", o.req.Target, o.what, scale.ErrNotFound)
	}
	if o.stale {
		sc, err := h.scaler.GetScale(ctx, o.req.Target)
		if err != nil {
			return scale.Result{}, err
		}
		h.recorder.Eventf(on, corev1.EventTypeWarning, EventStaleDecision,
			"refused decision %d (%d replicas): older than decision %d already applied", o.req.Sequence, o.req.Desired, o.last)
		return scale.Result{Applied: sc.Replicas, Previous: sc.Replicas, Stale: true, LastSequence: o.last}, nil
	}
	if out.Refused != nil {
		return scale.Result{}, fmt.Errorf("%s: %w", o.what, out.Refused)
	}
	res := scale.Result{Applied: out.After, Previous: out.Before, Changed: out.Patched, LastSequence: max(o.req.Sequence, o.last)}
	if o.req.DryRun {
		res.LastSequence = o.last
	}
	return res, nil
}

// only returns the one object of objs (an index's answer: the
// PodAutoscalers naming target t) not being deleted, the zero P when there
// is none; two are an error naming both. kinds names them in the error
// ("podautoscalers").
func only[P metav1.Object](objs []any, t scale.Target, kinds string) (P, error) {
	var found, zero P
	have := false
	for _, o := range objs {
		pa, ok := o.(P)
		if !ok || pa.GetDeletionTimestamp() != nil {
			continue
		}
		if have {
			return zero, fmt.Errorf("target %s: %s %s and %s both scale it", t, kinds, found.GetName(), pa.GetName())
		}
		found, have = pa, true
	}
	return found, nil
}

// targetStatus is what is known about target t's scale: its replicas, and
// the decision recorded for it (nil when none).
func targetStatus(ctx context.Context, s scaleReader, t scale.Target, rec *Decision) (scale.Status, error) {
	sc, err := s.GetScale(ctx, t)
	if err != nil {
		return scale.Status{}, err
	}
	st := scale.Status{Replicas: sc.Replicas}
	if rec != nil {
		st.LastSequence, st.LastReason, st.LastApplied = sequence(rec), rec.Reason, rec.Time.Time
	}
	return st, nil
}
