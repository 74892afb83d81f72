package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/scaleop"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// Annotations on a PodAutoscaler that the actuator reads. The last
// decision is not one of them: it is status (status.lastDecision), written
// through the status subresource.
const (
	// AnnotationDryRun "true" makes the actuator record and report what it
	// would do to the target and change nothing.
	AnnotationDryRun = "autoscaling.tidal.dev/dry-run"
	// AnnotationPaused "true" freezes the target at its current scale;
	// decisions are still recorded and reported.
	AnnotationPaused = "autoscaling.tidal.dev/paused"
)

// Event reasons.
const (
	EventScaled         = "Scaled"
	EventDryRun         = "DryRunScale"
	EventPaused         = "ScalePaused"
	EventStaleDecision  = scaleop.EventStaleDecision // the Warning scaleop records
	EventInvalidSpec    = "InvalidSpec"
	EventTargetNotFound = "TargetNotFound"
	EventNoScale        = "NoScaleSubresource"
)

// Reasons of the Ready condition, and the Active condition's reason when it
// is True (Knative leaves it empty; Kubernetes conditions need one).
const (
	ReasonReady          = "Scaling"
	ReasonPaused         = "Paused"
	ReasonDryRun         = "DryRun"
	ReasonInitializing   = "Initializing"
	ReasonInvalidSpec    = "InvalidSpec"
	ReasonTargetNotFound = "TargetNotFound"
	ReasonNoScale        = "NoScaleSubresource"
	ReasonActive         = "Serving"
)

// lastSequence is the sequence of pa's recorded decision, 0 when none is.
func lastSequence(pa *autoscalingv1alpha1.PodAutoscaler) uint64 {
	if d := pa.Status.LastDecision; d != nil && d.Sequence > 0 {
		return uint64(d.Sequence)
	}
	return 0
}

func annotationTrue(pa *autoscalingv1alpha1.PodAutoscaler, key string) bool {
	v, ok := pa.Annotations[key]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// ErrInvalidPodAutoscaler is returned for a PodAutoscaler whose annotations
// do not parse; the error says which and why.
var ErrInvalidPodAutoscaler = errors.New("invalid podautoscaler")

// outcome is what one reconcile did to the target.
type outcome struct {
	// Before and After are the target's spec.replicas before and after.
	Before, After int32
	// Want is what the §6 rules settled on; -1 means unknown.
	Want int32
	// Patched is true when the target's scale was written.
	Patched bool
	// Suppressed is the write a dry run or a pause held back, if any.
	Suppressed *int32
	// Requeue is when to reconcile again; 0 means only on events.
	Requeue time.Duration
	// Refused is why the target could not be reconciled (a missing target,
	// one without /scale, an invalid PodAutoscaler), already reported in
	// status and Events; a worker absorbs it, Scale returns it.
	Refused error
	// PA is the PodAutoscaler as written (or as read, when nothing was).
	PA *autoscalingv1alpha1.PodAutoscaler
}

// current returns the PodAutoscaler name as this process last saw it: the
// cache's copy, or our own newer write the cache has not delivered yet.
// Callers treat it as read-only. nil means it does not exist.
func (c *Controller) current(name cache.ObjectName) (*autoscalingv1alpha1.PodAutoscaler, error) {
	pa, err := c.pas.PodAutoscalers(name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		c.written.Delete(name)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if w, ok := c.written.Newer(name, pa.ResourceVersion); ok {
		return w, nil
	}
	return pa, nil
}

// refresh reads name from the API server, after a write conflicted: the
// cache is behind someone else's write.
func (c *Controller) refresh(ctx context.Context, name cache.ObjectName) error {
	pa, err := c.tidal.AutoscalingV1alpha1().PodAutoscalers(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get podautoscaler %s: %w", name, err)
	}
	c.written.Put(name, pa.ResourceVersion, pa)
	return nil
}

// conflictRetries bounds the re-reads after write conflicts in one call.
const conflictRetries = 5

// reconcileLatest reconciles name from the newest copy this process knows,
// reading it again from the API server after a conflict. apply, when set,
// prepares each attempt's copy (a Scale call records its decision there)
// and may end the call with a result of its own. The caller holds name's lock.
func (c *Controller) reconcileLatest(ctx context.Context, name cache.ObjectName,
	apply func(pa *autoscalingv1alpha1.PodAutoscaler) (decision *autoscalingv1alpha1.PodAutoscalerDecision, done bool),
	dryRun bool,
) (outcome, *autoscalingv1alpha1.PodAutoscaler, error) {
	for attempt := 0; ; attempt++ {
		pa, err := c.current(name)
		if err != nil || pa == nil {
			return outcome{}, nil, err
		}
		var dec *autoscalingv1alpha1.PodAutoscalerDecision
		if apply != nil {
			var done bool
			if dec, done = apply(pa); done {
				return outcome{PA: pa}, pa, nil
			}
		}
		out, err := c.reconcile(ctx, pa.DeepCopy(), dec, dryRun)
		if !apierrors.IsConflict(err) || attempt == conflictRetries {
			return out, pa, err
		}
		if err := c.refresh(ctx, name); err != nil {
			return out, pa, err
		}
	}
}

// sync reconciles the PodAutoscaler name from the cache.
func (c *Controller) sync(ctx context.Context, name cache.ObjectName) (time.Duration, error) {
	unlock := c.lock(name)
	defer unlock()
	pa, err := c.current(name)
	if err != nil {
		return 0, err
	}
	if pa == nil {
		c.selectors.Delete(name)
		if _, mine := c.owns(name); !mine {
			return 0, nil
		}
		return 0, c.deleteOrphanMetric(ctx, name)
	}
	if _, mine := c.owns(name); !mine {
		// Another replica reconciles it; its pods need not wake us.
		c.selectors.Delete(name)
		return 0, nil
	}
	if pa.DeletionTimestamp != nil {
		// Being deleted: leave the target as it is, and do not recreate the
		// Metric the garbage collector is removing.
		return 0, nil
	}
	out, _, err := c.reconcileLatest(ctx, name, nil, false)
	return out.Requeue, err
}

// revision resolves the PodAutoscaler's KPA settings.
func (c *Controller) revision(pa *autoscalingv1alpha1.PodAutoscaler) (kpaconfig.Revision, error) {
	rev, err := kpaconfig.NewRevision(c.cfg.Autoscaler, c.cfg.Deployment, pa.Annotations, pa.Spec.ContainerConcurrency,
		pa.Spec.Reachability != autoscalingv1alpha1.ReachabilityUnreachable)
	if err != nil {
		return rev, err
	}
	if m := pa.Spec.Metric; m != "" {
		metric := kpaspec.Concurrency
		if m == autoscalingv1alpha1.MetricRPS {
			metric = kpaspec.RPS
		}
		rev.Annotations.Metric = &metric
	}
	return rev, nil
}

// observed is what one reconcile reads of the world, all from caches.
type observed struct {
	rev    kpaconfig.Revision
	target scale.Target
	scale  scale.Scale
	ready  int32
	// sel selects the target's pods (nothing when it reports no selector).
	sel labels.Selector
	// decision is the one the rules follow: the new one being recorded, or
	// the one recorded in status; nil before the first.
	decision *autoscalingv1alpha1.PodAutoscalerDecision
}

// reconcile converges pa's target, status and Metric in four steps:
// observe (caches only), the §6 rules, status, then the target and the
// Metric. decision, when set, is a new decision to record in
// status.lastDecision and follow; dryRun computes everything and writes
// nothing. pa is the caller's copy; the caller holds its lock.
//
// Status is written first, once, with the resourceVersion pa was read at,
// and carries the decision the target is about to be scaled to: if another
// writer recorded a newer decision meanwhile, the write conflicts and the
// target is left alone, so a late copy never undoes a newer decision.
func (c *Controller) reconcile(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler, decision *autoscalingv1alpha1.PodAutoscalerDecision, dryRun bool) (outcome, error) {
	now := c.clock.Now()
	name := cache.MetaObjectToName(pa)
	out := outcome{Want: kpaspec.ScaleUnknown, PA: pa}
	st := pa.Status.DeepCopy()
	st.ObservedGeneration = pa.Generation
	st.MetricName = pa.Name
	if decision != nil && !dryRun {
		st.LastDecision = decision.DeepCopy()
	}

	// Observe.
	obs, reason, eventReason, err := c.observe(ctx, pa, decision)
	if reason != "" {
		out.Refused = err
		if errors.Is(err, scale.ErrNotFound) {
			out.Requeue = c.cfg.TargetRetry
		}
		if dryRun {
			return out, nil
		}
		msg := err.Error()
		prev := findCondition(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionReady)
		setCondition(&st.Conditions, metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionReady,
			Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: pa.Generation}, now)
		if err := c.writeStatus(ctx, pa, st, false); err != nil {
			return out, err
		}
		if prev == nil || prev.Reason != reason || prev.Message != msg {
			c.recorder.Event(pa, corev1.EventTypeWarning, eventReason, msg)
		}
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.Before, out.After = obs.scale.Replicas, obs.scale.Replicas
	if !dryRun {
		c.selectors.Set(name, pa.Namespace, obs.sel)
	}

	// Rules.
	res := c.rules(pa, &obs, now)
	out.Want = res.Want
	if len(res.Requeue) > 0 {
		out.Requeue = slices.Min(res.Requeue)
	}
	paused, dry := annotationTrue(pa, AnnotationPaused), annotationTrue(pa, AnnotationDryRun)
	var patch *int32
	if res.Patch != nil {
		to := *res.Patch
		if dryRun || dry || paused {
			out.Suppressed = &to
		} else {
			patch = &to
		}
	}
	if dryRun {
		return out, nil
	}

	// Status.
	c.setStatus(st, pa, &obs, &res, out.Suppressed, paused, dry, now)
	// Knative's reconciler runs again on the watch event of its own status
	// update, and its rules count on that pass: a PodAutoscaler that just
	// went inactive, or whose desired scale (the SKS mode here) changed, is
	// only then put on its way to zero. The controller ignores the echoes of
	// its own writes, so a reconcile that changes either asks for the next
	// pass itself; that pass reads them back unchanged and asks for none.
	if res.ActiveChanged || !equalScale(pa.Status.DesiredScale, st.DesiredScale) {
		out.Requeue = ownWriteRequeue
	}
	if patch != nil {
		st.LastScaleTime = &metav1.Time{Time: now}
	}
	// Before a patch the write is made even when status is unchanged: it
	// is what proves pa current.
	if err := c.writeStatus(ctx, pa, st, patch != nil); err != nil {
		return out, err
	}

	// Target and Metric.
	rec, hasRec := autoscalingv1alpha1.PodAutoscalerDecision{}, obs.decision != nil
	if hasRec {
		rec = *obs.decision
	}
	if res.Patch != nil {
		msg := scaleMessage(rec.Reason, rec.DesiredScale, hasRec, obs.scale.Replicas, *res.Patch, &obs.rev)
		switch {
		case dry:
			c.recorder.Eventf(pa, corev1.EventTypeNormal, EventDryRun, "dry run, not applied: %s", msg)
		case paused:
			c.recorder.Eventf(pa, corev1.EventTypeNormal, EventPaused, "paused at %d, not applied: %s", obs.scale.Replicas, msg)
		default:
			if err := c.scaler.SetReplicas(ctx, obs.target, *patch); err != nil {
				return out, fmt.Errorf("scale %s: %w", obs.target, err)
			}
			out.After, out.Patched = *patch, true
			c.recorder.Event(pa, corev1.EventTypeNormal, EventScaled, msg)
			c.log.Info("scaled", zap.String("podautoscaler", name.String()), zap.Int32("from", obs.scale.Replicas),
				zap.Int32("to", *patch), zap.Int64("sequence", rec.Sequence), zap.String("reason", rec.Reason))
		}
	}
	return out, c.reconcileMetric(ctx, pa, &obs.rev, res.Metric, obs.target, obs.scale.Selector)
}

// observe reads what the rules need, from caches. A target that cannot be
// reconciled until something changes comes back as a Ready condition reason,
// an Event reason and the error saying why.
func (c *Controller) observe(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler, decision *autoscalingv1alpha1.PodAutoscalerDecision) (obs observed, reason, eventReason string, err error) {
	obs.decision = pa.Status.LastDecision
	if decision != nil {
		obs.decision = decision
	}
	if obs.rev, err = c.revision(pa); err != nil {
		// Retrying cannot help until the user fixes the object, which
		// triggers a reconcile.
		return obs, ReasonInvalidSpec, EventInvalidSpec, fmt.Errorf("%w: %w", ErrInvalidPodAutoscaler, err)
	}
	obs.target = targetOf(pa)
	obs.scale, err = c.scaler.GetScale(ctx, obs.target)
	switch {
	case errors.Is(err, scale.ErrNotFound):
		return obs, ReasonTargetNotFound, EventTargetNotFound, err
	case errors.Is(err, scale.ErrNoScaleSubresource):
		return obs, ReasonNoScale, EventNoScale, err
	case err != nil:
		return obs, "", "", err
	}
	sel := labels.Nothing()
	if obs.scale.Selector != "" {
		if sel, err = labels.Parse(obs.scale.Selector); err != nil {
			return obs, ReasonNoScale, EventNoScale, fmt.Errorf("target %s: selector %q: %w: %w", obs.target, obs.scale.Selector, scale.ErrNoScaleSubresource, err)
		}
	}
	obs.sel = sel
	obs.ready, err = pods.CountReady(c.podIndexer, pa.Namespace, sel)
	return obs, "", "", err
}

// rules applies the §6 reconciler rules (or the lag strategy's) to what
// was observed.
func (c *Controller) rules(pa *autoscalingv1alpha1.PodAutoscaler, obs *observed, now time.Time) kparules.Result {
	dec := kpaspec.Status{DesiredScale: kpaspec.ScaleUnknown}
	if d := obs.decision; d != nil {
		dec.DesiredScale = d.DesiredScale
		if d.ExcessBurstCapacity != nil {
			dec.ExcessBurstCapacity = *d.ExcessBurstCapacity
		}
	}
	active, activeAge := activeCondition(pa, now)
	replicas := obs.scale.Replicas
	in := kparules.Input{
		Revision:               obs.rev,
		Reachability:           reachability(pa.Spec.Reachability),
		Active:                 active,
		ActiveAge:              activeAge,
		ScaleTargetInitialized: conditionTrue(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized),
		ServiceNameSet:         true,
		PriorDesiredScale:      pa.Status.DesiredScale,
		SKS:                    syntheticSKS(pa, dec),
		Replicas:               &replicas,
		ReadyPods:              obs.ready,
		Decider:                dec,
	}
	if pa.Spec.Strategy == autoscalingv1alpha1.StrategyLag {
		return kparules.ReconcileLag(in)
	}
	// tidal has no activator: nothing has to be in the path before the
	// last pod goes, so the probe always succeeds.
	return kparules.Reconcile(in, func() bool { return true })
}

// setStatus fills st from the rules' result (spec §6.2 step 9).
func (c *Controller) setStatus(st *autoscalingv1alpha1.PodAutoscalerStatus, pa *autoscalingv1alpha1.PodAutoscaler, obs *observed,
	res *kparules.Result, suppressed *int32, paused, dry bool, now time.Time,
) {
	if res.DesiredScale >= 0 {
		ds := res.DesiredScale
		st.DesiredScale = &ds
	}
	as := res.ActualScale
	st.ActualScale = &as
	activeCond := metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionActive, Status: metav1.ConditionStatus(res.Active.Status),
		Reason: res.Active.Reason, Message: res.Active.Message, ObservedGeneration: pa.Generation}
	if activeCond.Reason == "" {
		activeCond.Reason = ReasonActive
	}
	if res.ActiveChanged || findCondition(st.Conditions, activeCond.Type) == nil {
		setConditionAt(&st.Conditions, activeCond, now)
	} else {
		keepTransition(&st.Conditions, activeCond)
	}
	initStatus := metav1.ConditionFalse
	if res.ScaleTargetInitialized {
		initStatus = metav1.ConditionTrue
	}
	setCondition(&st.Conditions, metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized,
		Status: initStatus, Reason: initReason(res.ScaleTargetInitialized), ObservedGeneration: pa.Generation}, now)
	readyCond := metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionReady, Status: metav1.ConditionTrue,
		Reason: ReasonReady, ObservedGeneration: pa.Generation}
	switch {
	case paused:
		readyCond.Reason, readyCond.Message = ReasonPaused, fmt.Sprintf("%s is true: the target is held at %d replicas", AnnotationPaused, obs.scale.Replicas)
	case dry:
		readyCond.Reason, readyCond.Message = ReasonDryRun, fmt.Sprintf("%s is true: decisions are recorded, not applied", AnnotationDryRun)
	case !res.ScaleTargetInitialized:
		readyCond.Status, readyCond.Reason = metav1.ConditionUnknown, ReasonInitializing
		readyCond.Message = "waiting for the target to reach its initial scale"
	}
	if suppressed != nil {
		readyCond.Message += fmt.Sprintf("; would scale %d → %d", obs.scale.Replicas, *suppressed)
	}
	setCondition(&st.Conditions, readyCond, now)
}

func initReason(ok bool) string {
	if ok {
		return "Initialized"
	}
	return "Initializing"
}

// writeStatus writes st if it differs from pa's status (or always, with
// force), with the resourceVersion pa was read at, and remembers the write
// so the next read sees it before the cache does. A write that conflicts
// leaves pa as it was.
func (c *Controller) writeStatus(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler, st *autoscalingv1alpha1.PodAutoscalerStatus, force bool) error {
	if !force && equality.Semantic.DeepEqual(&pa.Status, st) {
		return nil
	}
	if pa.ResourceVersion == "" {
		// An unconditional write could undo a newer decision.
		return fmt.Errorf("update status of podautoscaler %s/%s: no resourceVersion to write at", pa.Namespace, pa.Name)
	}
	upd := pa.DeepCopy()
	upd.Status = *st
	wctx, cancel := scale.Finishing(ctx) // the scale it records may be done already
	defer cancel()
	updated, err := c.tidal.AutoscalingV1alpha1().PodAutoscalers(pa.Namespace).UpdateStatus(wctx, upd, metav1.UpdateOptions{FieldManager: scale.FieldManager})
	if err != nil {
		return fmt.Errorf("update status of podautoscaler %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	c.written.Put(cache.MetaObjectToName(updated), updated.ResourceVersion, updated)
	*pa = *updated
	return nil
}

// readyPods counts the target's ready pods in namespace.
func (c *Controller) readyPods(namespace string, sel labels.Selector) (int32, error) {
	return pods.CountReady(c.podIndexer, namespace, sel)
}

func reachability(r autoscalingv1alpha1.Reachability) kparules.Reachability {
	switch r {
	case autoscalingv1alpha1.ReachabilityReachable:
		return kparules.Reachable
	case autoscalingv1alpha1.ReachabilityUnreachable:
		return kparules.Unreachable
	}
	return kparules.ReachabilityUnknown
}

// syntheticSKS stands in for Knative's ServerlessService, which tidal does
// not have: it always exists, its mode follows the last decision, and its
// activator endpoints are never populated, so the full scale-to-zero grace
// period applies after the PodAutoscaler goes inactive (the TBC 0 timeline
// of spec §6.4).
func syntheticSKS(pa *autoscalingv1alpha1.PodAutoscaler, dec kpaspec.Status) *kparules.SKS {
	want := dec.DesiredScale
	if ds := pa.Status.DesiredScale; ds != nil {
		want = *ds
	}
	return &kparules.SKS{Mode: kparules.SKSModeFor(want, dec.ExcessBurstCapacity), PrivateServiceNameSet: true}
}

// activeCondition reads the Active condition and its age; a new
// PodAutoscaler is Activating (Unknown) since its creation, as Knative
// initialises it.
func activeCondition(pa *autoscalingv1alpha1.PodAutoscaler, now time.Time) (kparules.Condition, time.Duration) {
	cond := findCondition(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionActive)
	if cond == nil {
		return kparules.Condition{Status: kparules.ConditionUnknown}, now.Sub(pa.CreationTimestamp.Time)
	}
	reason := cond.Reason
	if cond.Status == metav1.ConditionTrue && reason == ReasonActive {
		reason = ""
	}
	return kparules.Condition{Status: kparules.ConditionStatus(cond.Status), Reason: reason, Message: cond.Message}, now.Sub(cond.LastTransitionTime.Time)
}

// scaleMessage says in words why the target goes from → to: the decider's
// reason with the change spliced in after its leading "mode:", as in
// "panic: 5 → 12, observed concurrency 84 over target 7", and the §6 rule
// when it moved the decider's value.
func scaleMessage(reason string, desired int32, hasDecision bool, from, to int32, rev *kpaconfig.Revision) string {
	change := fmt.Sprintf("%d → %d", from, to)
	var msg string
	switch head, tail, ok := strings.Cut(reason, ": "); {
	case reason == "":
		msg = change
	case ok && !strings.ContainsAny(head, " ,"):
		msg = head + ": " + change + ", " + tail
	default:
		msg = change + ", " + reason
	}
	if !hasDecision {
		return msg + " (no decision yet; " + ruleNote(-1, to, rev) + ")"
	}
	if desired != to {
		return msg + fmt.Sprintf(" (decider wanted %d; %s)", desired, ruleNote(desired, to, rev))
	}
	return msg
}

func ruleNote(desired, to int32, rev *kpaconfig.Revision) string {
	lo, hi := rev.ScaleBounds()
	switch {
	case desired >= 0 && to > desired && to == lo:
		return fmt.Sprintf("min-scale %d", lo)
	case desired >= 0 && hi > 0 && to < desired && to == hi:
		return fmt.Sprintf("max-scale %d", hi)
	case desired == 0 && to == 1 && !rev.Config.EnableScaleToZero:
		return "scale to zero is disabled"
	case desired == 0 && to == 1:
		return "the last pod stays until the PodAutoscaler has been active for a stable window"
	case desired < 0 && to == 0:
		return "activation timed out"
	case desired < 0 && to == lo:
		return fmt.Sprintf("min-scale %d", lo)
	case desired < 0:
		return fmt.Sprintf("initial scale %d", to)
	case to > desired:
		return fmt.Sprintf("initial scale %d", to)
	}
	return "scale bounds"
}

// ownWriteRequeue is how soon a reconcile that changed what the rules read
// from status runs again: at once, as a watch event would.
const ownWriteRequeue = time.Millisecond

// equalScale reports whether two status desired scales (nil when unknown)
// are equal.
func equalScale(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
