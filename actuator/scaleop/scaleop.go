// Package scaleop is the part of a Scale call that tidal's PodAutoscaler
// controller and the Knative one share: a decision is checked against the
// PodAutoscaler's bounds, recorded in its status unless it is older than
// the decision recorded there (stale), and the call's result is made from
// the reconcile that applied it. Reading the PodAutoscaler, recording the
// decision and reconciling stay with each controller; an Op carries one
// call through the steps between.
package scaleop

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
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
)

// ErrOutOfRange is returned for a decision the PodAutoscaler's bounds
// refuse outright (above its max-scale, or a sequence no status can hold).
var ErrOutOfRange = errors.New("desired scale out of range")

// EventStaleDecision is the reason of the Warning a stale decision gets.
const EventStaleDecision = "StaleDecision"

// Scaler reads the scale of a target.
type Scaler interface {
	GetScale(ctx context.Context, t scale.Target) (scale.Scale, error)
}

// Op is one Scale call on a PodAutoscaler: Start, then Stamp, Attempt
// (from each attempt to record the decision) and Finish.
type Op struct {
	req  scale.Decision
	what string // "podautoscaler ns/name", in errors
	dec  autoscalingv1alpha1.PodAutoscalerDecision
	// last and stale are the newest attempt's comparison.
	last  uint64
	stale bool
}

// Start checks req against the PodAutoscaler name's max-scale (maxScale,
// 0 for none) and the range of a recorded sequence (status holds an
// int64, as Kubernetes integers are) and returns the call. kind names the
// PodAutoscaler in errors ("podautoscaler", "knative podautoscaler").
func Start(req scale.Decision, kind string, name cache.ObjectName, maxScale int32) (*Op, error) {
	what := kind + " " + name.String()
	if maxScale > 0 && req.Desired > maxScale {
		return nil, fmt.Errorf("desired_replicas %d for %s: %s has max-scale %d: %w", req.Desired, req.Target, what, maxScale, ErrOutOfRange)
	}
	if req.Sequence > math.MaxInt64 {
		return nil, fmt.Errorf("decision_sequence %d for %s: want at most %d (Unix milliseconds): %w",
			req.Sequence, req.Target, int64(math.MaxInt64), ErrOutOfRange)
	}
	return &Op{req: req, what: what}, nil
}

// Stamp makes the decision to record, made at now (once the caller holds
// the PodAutoscaler's lock), with the decider's excess burst capacity.
func (o *Op) Stamp(excessBurstCapacity *int32, now time.Time) {
	o.dec = autoscalingv1alpha1.PodAutoscalerDecision{Sequence: int64(o.req.Sequence), DesiredScale: o.req.Desired,
		ExcessBurstCapacity: excessBurstCapacity, Reason: o.req.Reason, Time: metav1.NewTime(now)}
}

// Attempt compares one attempt's copy of the PodAutoscaler with the
// request: last is the sequence recorded there and rec the decision (0
// and nil when none). It returns the decision to record, nil to converge
// only (this decision is recorded already), and done when the request is
// older than the recorded one: stale, nothing is reconciled.
func (o *Op) Attempt(last uint64, rec *autoscalingv1alpha1.PodAutoscalerDecision) (dec *autoscalingv1alpha1.PodAutoscalerDecision, done bool) {
	o.last = last
	if o.stale = o.req.Sequence < last; o.stale {
		return nil, true
	}
	if !o.req.DryRun && rec != nil && o.req.Sequence == last && o.req.Desired == rec.DesiredScale {
		return nil, false // already recorded: converge only
	}
	return &o.dec, false
}

// Outcome is what the call's reconcile did to the target.
type Outcome struct {
	// Before and After are the target's replicas before and after.
	Before, After int32
	// Patched is true when the target's scale was written.
	Patched bool
	// Requeue is when the PodAutoscaler's rules want it reconciled again.
	Requeue time.Duration
	// Refused is why the target could not be reconciled, already reported
	// in status and Events.
	Refused error
}

// Host is what Finish needs of the controller.
type Host struct {
	Scaler   Scaler
	Recorder record.EventRecorder
	// Requeue queues a reconcile of the PodAutoscaler after d.
	Requeue func(d time.Duration)
}

// Finish makes the call's result from its reconcile (out, err) and the
// PodAutoscaler the last attempt read, on (nil, untyped, when it was
// deleted meanwhile; the object a stale decision's Warning is recorded
// on). The pass the rules ask for is queued first, as a worker's reconcile
// queues it: a decision of 0 is often the last event the PodAutoscaler
// gets, and without that pass it never reaches zero. A stale decision is
// refused with a Warning and the target's current replicas.
func (o *Op) Finish(ctx context.Context, h Host, out Outcome, err error, on runtime.Object) (scale.Result, error) {
	if out.Requeue > 0 && !o.req.DryRun {
		h.Requeue(out.Requeue)
	}
	if err != nil {
		return scale.Result{}, fmt.Errorf("%s: %w", o.what, err)
	}
	if on == nil {
		return scale.Result{}, fmt.Errorf("target %s: %s was deleted: %w", o.req.Target, o.what, scale.ErrNotFound)
	}
	if o.stale {
		sc, err := h.Scaler.GetScale(ctx, o.req.Target)
		if err != nil {
			return scale.Result{}, err
		}
		h.Recorder.Eventf(on, corev1.EventTypeWarning, EventStaleDecision,
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

// Only returns the one object of objs (an index's answer: the
// PodAutoscalers naming target t) not being deleted, the zero P when there
// is none; two are an error naming both. kinds names them in the error
// ("podautoscalers").
func Only[P metav1.Object](objs []any, t scale.Target, kinds string) (P, error) {
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

// Status is what is known about target t's scale: its replicas, and the
// decision recorded for it (rec at sequence last; nil when none).
func Status(ctx context.Context, s Scaler, t scale.Target, last uint64, rec *autoscalingv1alpha1.PodAutoscalerDecision) (scale.Status, error) {
	sc, err := s.GetScale(ctx, t)
	if err != nil {
		return scale.Status{}, err
	}
	st := scale.Status{Replicas: sc.Replicas}
	if rec != nil {
		st.LastSequence, st.LastReason, st.LastApplied = last, rec.Reason, rec.Time.Time
	}
	return st, nil
}
