package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/scaleop"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
)

// ErrOutOfRange is returned for a desired scale the PodAutoscaler's bounds
// refuse outright (above its max-scale).
var ErrOutOfRange = scaleop.ErrOutOfRange

// ErrNotSynced is returned before the controller's caches have synced.
var ErrNotSynced = errors.New("podautoscaler caches not synced yet")

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
	return scaleop.Only[*autoscalingv1alpha1.PodAutoscaler](objs, t, "podautoscalers")
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
	name := cache.MetaObjectToName(pa)
	_, hi := rev.ScaleBounds()
	op, err := scaleop.Start(req.Decision, "podautoscaler", name, hi)
	if err != nil {
		return scale.Result{}, err
	}
	if owner, mine := c.owns(name); !mine {
		return scale.Result{}, &NotOwnerError{PodAutoscaler: name, Owner: owner}
	}
	unlock := c.lock(name)
	defer unlock()

	op.Stamp(req.ExcessBurstCapacity, c.clock.Now())
	// Each attempt compares with the newest copy this process knows; the
	// status write that records the decision is made at that copy's
	// resourceVersion, so a newer decision recorded elsewhere meanwhile
	// makes it conflict, and the next attempt, from a fresh read, finds
	// this one stale.
	out, cur, err := c.reconcileLatest(ctx, name, func(pa *autoscalingv1alpha1.PodAutoscaler) (*autoscalingv1alpha1.PodAutoscalerDecision, bool) {
		return op.Attempt(lastSequence(pa), pa.Status.LastDecision)
	}, req.DryRun)
	var on runtime.Object
	if cur != nil {
		on = cur
	}
	res, err := op.Finish(ctx, scaleop.Host{Scaler: c.scaler, Recorder: c.recorder, Requeue: func(d time.Duration) { c.AddAfter(name, d) }},
		scaleop.Outcome{Before: out.Before, After: out.After, Patched: out.Patched, Requeue: out.Requeue, Refused: out.Refused}, err, on)
	if err != nil || res.Stale {
		return res, err
	}
	// A dry run (the request's or the PodAutoscaler's) reports what the
	// target would have; a paused target keeps what it has.
	if out.Suppressed != nil && (req.DryRun || !annotationTrue(cur, AnnotationPaused)) {
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
	return scaleop.Status(ctx, c.scaler, t, lastSequence(pa), pa.Status.LastDecision)
}
