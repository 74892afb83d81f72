package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/actuator/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/actuator/kpa"
	"github.com/tidalscale/tidal/actuator/scale"
	deciderkpa "github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/decider/kpaconfig"
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
	EventStaleDecision  = "StaleDecision"
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

// errStaleCache stops a reconcile whose cached PodAutoscaler is older than
// the API server's.
var errStaleCache = errors.New("podautoscaler cache is behind the API server")

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
}

// sync reconciles the PodAutoscaler name from the cache.
func (c *Controller) sync(ctx context.Context, name cache.ObjectName) (time.Duration, error) {
	unlock := c.lock(name)
	defer unlock()
	pa, err := listers.NewNamespaced(c.pas, name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return 0, c.deleteOrphanMetric(ctx, name)
	}
	if err != nil {
		return 0, err
	}
	if pa.DeletionTimestamp != nil {
		// Being deleted: leave the target as it is, and do not recreate the
		// Metric the garbage collector is removing.
		return 0, nil
	}
	out, err := c.reconcile(ctx, pa.DeepCopy(), nil, false, false)
	if errors.Is(err, errStaleCache) {
		// A newer copy is on its way through the informer, which will
		// enqueue it again.
		return 0, nil
	}
	return out.Requeue, err
}

func (c *Controller) forget(name cache.ObjectName) {
	c.selMu.Lock()
	delete(c.selectors, name)
	c.selMu.Unlock()
	c.locks.Delete(name)
}

// revision resolves the PodAutoscaler's KPA settings.
func (c *Controller) revision(pa *autoscalingv1alpha1.PodAutoscaler) (kpaconfig.Revision, error) {
	rev, err := kpaconfig.NewRevision(c.cfg.Autoscaler, c.cfg.Deployment, pa.Annotations, pa.Spec.ContainerConcurrency,
		pa.Spec.Reachability != autoscalingv1alpha1.ReachabilityUnreachable)
	if err != nil {
		return rev, err
	}
	if m := pa.Spec.Metric; m != "" {
		metric := deciderkpa.Concurrency
		if m == autoscalingv1alpha1.MetricRPS {
			metric = deciderkpa.RPS
		}
		rev.Annotations.Metric = &metric
	}
	return rev, nil
}

// reconcile converges pa's target, Metric and status. decision, when set,
// replaces the recorded one (a dry-run Scale call); dryRun changes nothing
// and only reports. The caller holds pa's lock.
//
// fresh says pa was just read from the API server. A cached copy may lag a
// decision another caller has recorded since, so before writing the target
// from a cached copy, reconcile checks that the copy is current and gives up
// with errStaleCache otherwise: a late cache never undoes a newer decision.
func (c *Controller) reconcile(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler, decision *autoscalingv1alpha1.PodAutoscalerDecision, dryRun, fresh bool) (outcome, error) {
	now := c.clock.Now()
	name := cache.MetaObjectToName(pa)
	log := c.log.With(zap.String("podautoscaler", name.String()))
	st := pa.Status.DeepCopy()
	st.ObservedGeneration = pa.Generation
	st.MetricName = pa.Name
	out := outcome{Want: deciderkpa.ScaleUnknown}

	fail := func(reason, eventReason string, cause error, requeue time.Duration) (outcome, error) {
		msg := cause.Error()
		out.Requeue, out.Refused = requeue, cause
		if dryRun {
			return out, nil
		}
		prev := findCondition(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionReady)
		setCondition(&st.Conditions, metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionReady,
			Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: pa.Generation}, now)
		if prev == nil || prev.Reason != reason || prev.Message != msg {
			c.recorder.Event(pa, corev1.EventTypeWarning, eventReason, msg)
		}
		return out, c.writeStatus(ctx, pa, st)
	}

	rev, err := c.revision(pa)
	if err != nil {
		// Retrying cannot help until the user fixes the object, which
		// triggers a reconcile.
		return fail(ReasonInvalidSpec, EventInvalidSpec, fmt.Errorf("%w: %w", ErrInvalidPodAutoscaler, err), 0)
	}
	var rec autoscalingv1alpha1.PodAutoscalerDecision
	hasRec := false
	switch {
	case decision != nil:
		rec, hasRec = *decision, true
	case pa.Status.LastDecision != nil:
		rec, hasRec = *pa.Status.LastDecision, true
	}

	target := targetOf(pa)
	sc, err := c.scaler.GetScale(ctx, target)
	switch {
	case errors.Is(err, scale.ErrNotFound):
		return fail(ReasonTargetNotFound, EventTargetNotFound, err, c.cfg.TargetRetry)
	case errors.Is(err, scale.ErrNoScaleSubresource):
		return fail(ReasonNoScale, EventNoScale, err, 0)
	case err != nil:
		return out, err
	}
	out.Before, out.After = sc.Replicas, sc.Replicas

	sel := labels.Nothing()
	if sc.Selector != "" {
		if sel, err = labels.Parse(sc.Selector); err != nil {
			return fail(ReasonNoScale, EventNoScale, fmt.Errorf("target %s: selector %q: %w: %w", target, sc.Selector, scale.ErrNoScaleSubresource, err), 0)
		}
	}
	if !dryRun {
		c.selMu.Lock()
		c.selectors[name] = sel
		c.selMu.Unlock()
	}
	ready, err := c.readyPods(pa.Namespace, sel)
	if err != nil {
		return out, err
	}

	dec := deciderkpa.Status{DesiredScale: deciderkpa.ScaleUnknown}
	if hasRec {
		dec.DesiredScale = rec.DesiredScale
		if rec.ExcessBurstCapacity != nil {
			dec.ExcessBurstCapacity = *rec.ExcessBurstCapacity
		}
	}
	active, activeAge := activeCondition(pa, now)
	replicas := sc.Replicas
	in := kpa.Input{
		Revision:               rev,
		Reachability:           reachability(pa.Spec.Reachability),
		Active:                 active,
		ActiveAge:              activeAge,
		ScaleTargetInitialized: conditionTrue(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized),
		ServiceNameSet:         true,
		PriorDesiredScale:      pa.Status.DesiredScale,
		SKS:                    syntheticSKS(pa, dec),
		Replicas:               &replicas,
		ReadyPods:              ready,
		Decider:                dec,
	}
	var res kpa.Result
	if pa.Spec.Strategy == autoscalingv1alpha1.StrategyLag {
		res = lagRules(in)
	} else {
		// tidal has no activator: nothing has to be in the path before the
		// last pod goes, so the probe always succeeds.
		res = kpa.Reconcile(in, func() bool { return true })
	}
	out.Want = res.Want
	if len(res.Requeue) > 0 {
		out.Requeue = res.Requeue[0]
		for _, d := range res.Requeue[1:] {
			out.Requeue = min(out.Requeue, d)
		}
	}

	paused, dry := annotationTrue(pa, AnnotationPaused), annotationTrue(pa, AnnotationDryRun)
	if res.Patch != nil {
		to := *res.Patch
		msg := scaleMessage(rec.Reason, rec.DesiredScale, hasRec, sc.Replicas, to, &rev)
		switch {
		case dryRun:
			out.Suppressed = &to
		case dry:
			out.Suppressed = &to
			c.recorder.Eventf(pa, corev1.EventTypeNormal, EventDryRun, "dry run, not applied: %s", msg)
		case paused:
			out.Suppressed = &to
			c.recorder.Eventf(pa, corev1.EventTypeNormal, EventPaused, "paused at %d, not applied: %s", sc.Replicas, msg)
		default:
			if !fresh {
				cur, err := c.tidal.PodAutoscalers(pa.Namespace).Get(ctx, pa.Name, metav1.GetOptions{})
				if err != nil {
					return out, fmt.Errorf("get podautoscaler %s: %w", name, err)
				}
				if cur.ResourceVersion != pa.ResourceVersion {
					return out, errStaleCache
				}
			}
			if err := c.scaler.SetReplicas(ctx, target, to); err != nil {
				return out, fmt.Errorf("scale %s: %w", target, err)
			}
			out.After, out.Patched = to, true
			st.LastScaleTime = &metav1.Time{Time: now}
			c.recorder.Event(pa, corev1.EventTypeNormal, EventScaled, msg)
			log.Info("scaled", zap.Int32("from", sc.Replicas), zap.Int32("to", to),
				zap.Int64("sequence", rec.Sequence), zap.String("reason", rec.Reason))
		}
	}
	if dryRun {
		return out, nil
	}

	if err := c.reconcileMetric(ctx, pa, &rev, res.Metric, target, sc.Selector); err != nil {
		return out, err
	}

	// Status (spec §6.2 step 9).
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
		readyCond.Reason, readyCond.Message = ReasonPaused, fmt.Sprintf("%s is true: the target is held at %d replicas", AnnotationPaused, sc.Replicas)
	case dry:
		readyCond.Reason, readyCond.Message = ReasonDryRun, fmt.Sprintf("%s is true: decisions are recorded, not applied", AnnotationDryRun)
	case !res.ScaleTargetInitialized:
		readyCond.Status, readyCond.Reason = metav1.ConditionUnknown, ReasonInitializing
		readyCond.Message = "waiting for the target to reach its initial scale"
	}
	if out.Suppressed != nil {
		readyCond.Message += fmt.Sprintf("; would scale %d → %d", sc.Replicas, *out.Suppressed)
	}
	setCondition(&st.Conditions, readyCond, now)
	err = c.writeStatus(ctx, pa, st)
	if err != nil && out.Patched && apierrors.IsConflict(err) {
		// The target changed, but the status lost a race: keep at least
		// the time of the change, which the next reconcile would not see.
		if serr := c.stampScaleTime(ctx, pa.Namespace, pa.Name, now); serr != nil {
			log.Info("record lastScaleTime", zap.Error(serr))
		}
	}
	return out, err
}

func initReason(ok bool) string {
	if ok {
		return "Initialized"
	}
	return "Initializing"
}

// writeStatus writes st if it differs from pa's status, with the
// resourceVersion pa was read at. st carries pa's status.lastDecision, which
// may be older than the API server's if another replica recorded a decision
// since pa was read: the write then fails with a conflict instead of putting
// the older decision back, and the caller reconciles again from a new read.
func (c *Controller) writeStatus(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler, st *autoscalingv1alpha1.PodAutoscalerStatus) error {
	if equality.Semantic.DeepEqual(&pa.Status, st) {
		return nil
	}
	if pa.ResourceVersion == "" {
		// An unconditional write could undo a newer decision.
		return fmt.Errorf("update status of podautoscaler %s/%s: no resourceVersion to write at", pa.Namespace, pa.Name)
	}
	pa.Status = *st
	updated, err := c.tidal.PodAutoscalers(pa.Namespace).UpdateStatus(context.WithoutCancel(ctx), pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
	if err != nil {
		return fmt.Errorf("update status of podautoscaler %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	*pa = *updated
	return nil
}

// stampScaleTime sets status.lastScaleTime on the API server's copy, read
// afresh on every attempt so the rest of the status (the last decision
// above all) is written back as the server has it.
func (c *Controller) stampScaleTime(ctx context.Context, namespace, name string, now time.Time) error {
	client := c.tidal.PodAutoscalers(namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pa, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pa.Status.LastScaleTime = &metav1.Time{Time: now}
		_, err = client.UpdateStatus(ctx, pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
		return err
	})
}

// readyPods counts the target's pods that are Ready and not terminating.
func (c *Controller) readyPods(namespace string, sel labels.Selector) (int32, error) {
	pods, err := c.pods.Pods(namespace).List(sel)
	if err != nil {
		return 0, err
	}
	var n int32
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			n++
		}
	}
	return n, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func reachability(r autoscalingv1alpha1.Reachability) kpa.Reachability {
	switch r {
	case autoscalingv1alpha1.ReachabilityReachable:
		return kpa.Reachable
	case autoscalingv1alpha1.ReachabilityUnreachable:
		return kpa.Unreachable
	}
	return kpa.ReachabilityUnknown
}

// syntheticSKS stands in for Knative's ServerlessService, which tidal does
// not have: it always exists, its mode follows the last decision, and its
// activator endpoints are never populated, so the full scale-to-zero grace
// period applies after the PodAutoscaler goes inactive (the TBC 0 timeline
// of spec §6.4).
func syntheticSKS(pa *autoscalingv1alpha1.PodAutoscaler, dec deciderkpa.Status) *kpa.SKS {
	want := dec.DesiredScale
	if ds := pa.Status.DesiredScale; ds != nil {
		want = *ds
	}
	return &kpa.SKS{Mode: kpa.SKSModeFor(want, dec.ExcessBurstCapacity), PrivateServiceNameSet: true}
}

// activeCondition reads the Active condition and its age; a new
// PodAutoscaler is Activating (Unknown) since its creation, as Knative
// initialises it.
func activeCondition(pa *autoscalingv1alpha1.PodAutoscaler, now time.Time) (kpa.Condition, time.Duration) {
	cond := findCondition(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionActive)
	if cond == nil {
		return kpa.Condition{Status: kpa.ConditionUnknown}, now.Sub(pa.CreationTimestamp.Time)
	}
	reason := cond.Reason
	if cond.Status == metav1.ConditionTrue && reason == ReasonActive {
		reason = ""
	}
	return kpa.Condition{Status: kpa.ConditionStatus(cond.Status), Reason: reason, Message: cond.Message}, now.Sub(cond.LastTransitionTime.Time)
}

// lagRules applies what the lag strategy needs of the reconciler: the
// decider already capped the scale at the partition count and applied the
// idle timeout, so only min-scale and max-scale bound it here.
func lagRules(in kpa.Input) kpa.Result {
	r := kpa.Result{Want: in.Decider.DesiredScale, DesiredScale: in.Decider.DesiredScale, ActualScale: in.ReadyPods, Active: in.Active}
	if r.DesiredScale < 0 && in.PriorDesiredScale != nil {
		r.DesiredScale = *in.PriorDesiredScale
	}
	r.ScaleTargetInitialized = in.ScaleTargetInitialized || in.ReadyPods >= 1 || r.Want == 0
	if r.Want >= 0 {
		lo, hi := in.Revision.ScaleBounds()
		r.Want = kpa.ApplyBounds(lo, hi, r.Want)
		r.DesiredScale = r.Want
		if in.Replicas == nil || *in.Replicas != r.Want {
			p := r.Want
			r.Patch = &p
		}
	}
	next := in.Active
	switch {
	case r.Want == 0:
		next = kpa.Condition{Status: kpa.ConditionFalse, Reason: kpa.ReasonNoTraffic, Message: kpa.MessageNoTraffic}
	case r.Want > 0 && in.ReadyPods == 0:
		next = kpa.Condition{Status: kpa.ConditionUnknown, Reason: kpa.ReasonQueued, Message: kpa.MessageQueued}
	case r.Want > 0:
		next = kpa.Condition{Status: kpa.ConditionTrue}
	}
	r.Active = next
	r.ActiveChanged = next.Status != in.Active.Status || next.Reason != in.Active.Reason
	return r
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
