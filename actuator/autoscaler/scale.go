package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/actuator/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/actuator/scale"
)

// ErrOutOfRange is returned for a desired scale the PodAutoscaler's bounds
// refuse outright (above its max-scale).
var ErrOutOfRange = errors.New("desired scale out of range")

// ErrNotSynced is returned before the controller's caches have synced.
var ErrNotSynced = errors.New("podautoscaler caches not synced yet")

// Request is one decision to apply, as the deciders send it.
type Request struct {
	scale.Decision
	// ExcessBurstCapacity is the decider's, when known.
	ExcessBurstCapacity *int32
}

// podAutoscalerFor returns the PodAutoscaler scaling t, or nil.
func (c *Controller) podAutoscalerFor(t scale.Target) (*autoscalingv1alpha1.PodAutoscaler, error) {
	key, err := targetKey(t)
	if err != nil {
		return nil, err
	}
	objs, err := c.paInformer.GetIndexer().ByIndex(indexTarget, key)
	if err != nil {
		return nil, err
	}
	var found *autoscalingv1alpha1.PodAutoscaler
	for _, o := range objs {
		pa := o.(*autoscalingv1alpha1.PodAutoscaler)
		if pa.DeletionTimestamp != nil {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("target %s: podautoscalers %s and %s both scale it", t, found.Name, pa.Name)
		}
		found = pa
	}
	return found, nil
}

// Scale applies a decider's decision. When a PodAutoscaler names the
// target, the decision is recorded in its status.lastDecision (refused if
// older than the one recorded) and the target goes through the §6 rules;
// otherwise it is applied as is, with staleness tracked by this process
// only.
func (c *Controller) Scale(ctx context.Context, req Request) (scale.Result, error) {
	if !c.HasSynced() {
		// Without the PodAutoscalers cached, a target's rules are unknown.
		return scale.Result{}, ErrNotSynced
	}
	pa, err := c.podAutoscalerFor(req.Target)
	if err != nil {
		return scale.Result{}, err
	}
	if pa == nil {
		if c.plain == nil {
			return scale.Result{}, fmt.Errorf("target %s: no podautoscaler scales it", req.Target)
		}
		return c.plain.Apply(ctx, req.Decision)
	}
	rev, err := c.revision(pa)
	if err != nil {
		return scale.Result{}, fmt.Errorf("podautoscaler %s/%s: %w: %w", pa.Namespace, pa.Name, ErrInvalidPodAutoscaler, err)
	}
	if _, hi := rev.ScaleBounds(); hi > 0 && req.Desired > hi {
		return scale.Result{}, fmt.Errorf("desired_replicas %d for %s: podautoscaler %s/%s has max-scale %d: %w",
			req.Desired, req.Target, pa.Namespace, pa.Name, hi, ErrOutOfRange)
	}
	if req.Sequence > math.MaxInt64 {
		// status.lastDecision.sequence is an int64, as Kubernetes integers are.
		return scale.Result{}, fmt.Errorf("decision_sequence %d for %s: want at most %d (Unix milliseconds): %w",
			req.Sequence, req.Target, int64(math.MaxInt64), ErrOutOfRange)
	}

	name := cache.MetaObjectToName(pa)
	unlock := c.lock(name)
	defer unlock()

	dec := autoscalingv1alpha1.PodAutoscalerDecision{Sequence: int64(req.Sequence), DesiredScale: req.Desired,
		ExcessBurstCapacity: req.ExcessBurstCapacity, Reason: req.Reason, Time: metav1.NewTime(c.clock.Now())}
	client := c.tidal.PodAutoscalers(pa.Namespace)
	var (
		fresh *autoscalingv1alpha1.PodAutoscaler
		last  uint64
		stale bool
	)
	// Record the decision in status.lastDecision with the resourceVersion
	// it was compared at: if another replica recorded one in between, the
	// write conflicts, and the new read is compared again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		fresh, err = client.Get(ctx, pa.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = lastSequence(fresh)
		if req.Sequence < last {
			stale = true
			return nil
		}
		if rec := fresh.Status.LastDecision; req.DryRun || (rec != nil && req.Sequence == last && req.Desired == rec.DesiredScale) {
			return nil
		}
		fresh.Status.LastDecision = dec.DeepCopy()
		fresh, err = client.UpdateStatus(ctx, fresh, metav1.UpdateOptions{FieldManager: scale.FieldManager})
		return err
	})
	if err != nil {
		return scale.Result{}, fmt.Errorf("record decision on podautoscaler %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	if stale {
		cur, err := c.scaler.GetScale(ctx, req.Target)
		if err != nil {
			return scale.Result{}, err
		}
		c.recorder.Eventf(fresh, corev1.EventTypeWarning, EventStaleDecision,
			"refused decision %d (%d replicas): older than decision %d already applied", req.Sequence, req.Desired, last)
		return scale.Result{Applied: cur.Replicas, Previous: cur.Replicas, Stale: true, LastSequence: last}, nil
	}
	var override *autoscalingv1alpha1.PodAutoscalerDecision
	if req.DryRun {
		override = &dec
	}
	// Another replica's worker may write the status between our record and
	// our status write; reconcile again from a fresh read (the target is
	// then already patched, so nothing is written twice).
	var (
		out            outcome
		before         int32
		patched, first = false, true
	)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if fresh, err = client.Get(ctx, pa.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		var err error
		out, err = c.reconcile(ctx, fresh, override, req.DryRun, true)
		if first {
			before, first = out.Before, false
		}
		patched = patched || out.Patched
		return err
	})
	if err != nil {
		return scale.Result{}, err
	}
	out.Before, out.Patched = before, patched
	if out.Refused != nil {
		return scale.Result{}, fmt.Errorf("podautoscaler %s/%s: %w", pa.Namespace, pa.Name, out.Refused)
	}
	// A newer decision another replica recorded meanwhile is the one the
	// last reconcile applied: report its sequence.
	res := scale.Result{Applied: out.After, Previous: out.Before, Changed: out.Patched, LastSequence: max(req.Sequence, lastSequence(fresh))}
	if req.DryRun {
		res.LastSequence = last
	}
	// A dry run (the request's or the PodAutoscaler's) reports what the
	// target would have; a paused target keeps what it has.
	if out.Suppressed != nil && (req.DryRun || !annotationTrue(fresh, AnnotationPaused)) {
		res.Applied = *out.Suppressed
	}
	return res, nil
}

// Status is what is known about a target's scale.
func (c *Controller) Status(ctx context.Context, t scale.Target) (scale.Status, error) {
	if !c.HasSynced() {
		return scale.Status{}, ErrNotSynced
	}
	pa, err := c.podAutoscalerFor(t)
	if err != nil {
		return scale.Status{}, err
	}
	if pa == nil {
		if c.plain == nil {
			return scale.Status{}, fmt.Errorf("target %s: no podautoscaler scales it", t)
		}
		return c.plain.Get(ctx, t)
	}
	sc, err := c.scaler.GetScale(ctx, t)
	if err != nil {
		return scale.Status{}, err
	}
	st := scale.Status{Replicas: sc.Replicas}
	if d := pa.Status.LastDecision; d != nil {
		st.LastSequence, st.LastReason, st.LastApplied = lastSequence(pa), d.Reason, d.Time.Time
	}
	return st, nil
}
