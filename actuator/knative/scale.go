package knative

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/scaleop"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/targetkey"
)

// ErrNotSynced is returned before the controller's caches have synced.
var ErrNotSynced = errors.New("knative podautoscaler caches not synced yet")

// ErrOutOfRange is returned for a decision the PodAutoscaler's bounds
// refuse outright.
var ErrOutOfRange = podautoscaler.ErrOutOfRange

// podAutoscalerFor returns the PodAutoscaler of this controller's classes
// scaling t, or nil.
func (c *Controller) podAutoscalerFor(t scale.Target) (*knautoscaling.PodAutoscaler, error) {
	if _, err := t.GroupVersionKind(); err != nil {
		return nil, nil //nolint:nilerr // no PodAutoscaler names a malformed target
	}
	objs, err := c.paInformer.GetIndexer().ByIndex(indexTarget, targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind))
	if err != nil {
		return nil, err
	}
	return scaleop.Only[*knautoscaling.PodAutoscaler](objs, t, "knative podautoscalers")
}

// Handles reports whether a Knative PodAutoscaler of this controller's
// classes scales t: the Scale RPC sends t's decisions here then. Before the
// caches have synced it returns ErrNotSynced, so that no decision for a
// Knative revision takes another path meanwhile.
func (c *Controller) Handles(t scale.Target) (bool, error) {
	if !c.HasSynced() {
		return false, ErrNotSynced
	}
	pa, err := c.podAutoscalerFor(t)
	return pa != nil, err
}

// Scale applies a decider's decision to the target of a Knative
// PodAutoscaler: recorded in its status (refused if older than the one
// recorded) and applied through the KPA rules.
func (c *Controller) Scale(ctx context.Context, req podautoscaler.Request) (scale.Result, error) {
	if !c.HasSynced() {
		return scale.Result{}, ErrNotSynced
	}
	pa, err := c.podAutoscalerFor(req.Target)
	if err != nil {
		return scale.Result{}, err
	}
	if pa == nil {
		return scale.Result{}, fmt.Errorf("target %s: no knative podautoscaler scales it: %w", req.Target, scale.ErrNotFound)
	}
	rev, err := c.revision(pa)
	if err != nil {
		return scale.Result{}, fmt.Errorf("knative podautoscaler %s/%s: %w: %w", pa.Namespace, pa.Name, ErrInvalidPodAutoscaler, err)
	}
	name := cache.MetaObjectToName(pa)
	_, hi := rev.ScaleBounds()
	op, err := scaleop.Start(req.Decision, "knative podautoscaler", name, hi)
	if err != nil {
		return scale.Result{}, err
	}
	if owner, mine := c.Owns(name); !mine {
		return scale.Result{}, &podautoscaler.NotOwnerError{PodAutoscaler: name, Owner: owner}
	}
	unlock := c.lock(name)
	defer unlock()

	op.Stamp(req.ExcessBurstCapacity, c.clock.Now())
	out, cur, err := c.reconcileLatest(ctx, name, func(pa *knautoscaling.PodAutoscaler) (*autoscalingv1alpha1.PodAutoscalerDecision, bool) {
		rec, last := recorded(pa)
		return op.Attempt(last, rec)
	}, req.DryRun)
	var on runtime.Object
	if cur != nil {
		on = ref(cur)
	}
	return op.Finish(ctx, scaleop.Host{Scaler: c.scaler, Recorder: c.recorder, Requeue: func(d time.Duration) { c.AddAfter(name, d) }},
		scaleop.Outcome(out), err, on)
}

// Status is what is known about the scale of a Knative PodAutoscaler's
// target.
func (c *Controller) Status(ctx context.Context, t scale.Target) (scale.Status, error) {
	if !c.HasSynced() {
		return scale.Status{}, ErrNotSynced
	}
	pa, err := c.podAutoscalerFor(t)
	if err != nil {
		return scale.Status{}, err
	}
	if pa == nil {
		return scale.Status{}, fmt.Errorf("target %s: no knative podautoscaler scales it: %w", t, scale.ErrNotFound)
	}
	rec, last := recorded(pa)
	return scaleop.Status(ctx, c.scaler, t, last, rec)
}

// recorded is the decision recorded in pa's status and its sequence; nil
// and 0 when none.
func recorded(pa *knautoscaling.PodAutoscaler) (*autoscalingv1alpha1.PodAutoscalerDecision, uint64) {
	rec := lastDecision(pa)
	if rec == nil {
		return nil, 0
	}
	return rec, uint64(rec.Sequence)
}
