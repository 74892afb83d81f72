package knative

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// AnnotationDecision, in a PodAutoscaler's status.annotations, records the
// last decision applied to it (JSON of tidal's PodAutoscalerDecision), as
// tidal's own PodAutoscaler records it in status.lastDecision: a decision
// older than it is refused, across restarts and replicas.
const AnnotationDecision = "autoscaling.tidal.dev/decision"

// maxReason bounds the decision reason kept in status.
const maxReason = 256

// Event reasons.
const (
	EventScaled         = "Scaled"
	EventStaleDecision  = scaleop.EventStaleDecision // the Warning scaleop records
	EventInvalidSpec    = "InvalidSpec"
	EventTargetNotFound = "TargetNotFound"
	EventNotOwned       = "NotOwned"
	EventCreated        = "Created"
)

// Reasons Knative uses (pa_lifecycle.go, kpa.go) for the conditions tidal
// sets besides the rules' Active reasons.
const (
	reasonSKSNotReady = "NotReady"
	reasonNotOwned    = "NotOwned"
	reasonInvalidSpec = "InvalidSpec"
	// messageNoPrivateService is Knative's noPrivateServiceName.
	messageNoPrivateService = "No Private Service Name"
)

// ErrInvalidPodAutoscaler is returned for a PodAutoscaler whose annotations
// do not parse.
var ErrInvalidPodAutoscaler = errors.New("invalid knative podautoscaler")

// ErrNotOwned is returned when the ServerlessService of a PodAutoscaler's
// name exists and another object controls it.
var ErrNotOwned = errors.New("serverlessservice not owned by the podautoscaler")

// outcome is what one reconcile did.
type outcome struct {
	Before, After int32
	Patched       bool
	Requeue       time.Duration
	// Refused says why the target could not be reconciled, already
	// reported in status and Events.
	Refused error
}

// conflictRetries bounds the re-reads after write conflicts in one call.
const conflictRetries = 5

// ownWriteRequeue is how soon a reconcile that changed what the rules read
// from status runs again (see tidal's PodAutoscaler controller: Knative's
// reconciler counts on the pass its own status write triggers).
const ownWriteRequeue = time.Millisecond

// sync reconciles the PodAutoscaler name from the cache.
func (c *Controller) sync(ctx context.Context, name cache.ObjectName) (time.Duration, error) {
	unlock := c.lock(name)
	defer unlock()
	pa, err := c.current(name)
	if err != nil {
		return 0, err
	}
	if pa == nil || !c.mine(pa) {
		// Gone, or of another class now: its ServerlessService stays with
		// it (owned by it, for the class's reconciler or the garbage
		// collector).
		c.selectors.Delete(name)
		return 0, nil
	}
	if _, mine := c.Owns(name); !mine {
		c.selectors.Delete(name)
		return 0, nil
	}
	if pa.DeletionTimestamp != nil {
		return 0, nil
	}
	out, _, err := c.reconcileLatest(ctx, name, nil, false)
	return out.Requeue, err
}

// reconcileLatest reconciles name from the newest copy this process knows,
// reading it again after a conflict; apply prepares each attempt (see
// tidal's PodAutoscaler controller). The caller holds name's lock.
func (c *Controller) reconcileLatest(ctx context.Context, name cache.ObjectName,
	apply func(pa *knautoscaling.PodAutoscaler) (decision *autoscalingv1alpha1.PodAutoscalerDecision, done bool), dryRun bool,
) (outcome, *knautoscaling.PodAutoscaler, error) {
	for attempt := 0; ; attempt++ {
		pa, err := c.current(name)
		if err != nil || pa == nil {
			return outcome{}, nil, err
		}
		var dec *autoscalingv1alpha1.PodAutoscalerDecision
		if apply != nil {
			var done bool
			if dec, done = apply(pa); done {
				return outcome{}, pa, nil
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

// lastDecision reads the decision recorded in pa's status; nil when none
// (or when what is there does not parse: the next decision replaces it).
func lastDecision(pa *knautoscaling.PodAutoscaler) *autoscalingv1alpha1.PodAutoscalerDecision {
	v, ok := pa.Status.Annotations[AnnotationDecision]
	if !ok {
		return nil
	}
	var d autoscalingv1alpha1.PodAutoscalerDecision
	if err := json.Unmarshal([]byte(v), &d); err != nil || d.Sequence <= 0 {
		return nil
	}
	return &d
}

func recordDecision(st *knautoscaling.PodAutoscalerStatus, d *autoscalingv1alpha1.PodAutoscalerDecision) {
	rec := *d
	if len(rec.Reason) > maxReason {
		rec.Reason = rec.Reason[:maxReason]
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return // a struct of numbers and a string marshals
	}
	if st.Annotations == nil {
		st.Annotations = map[string]string{}
	} else {
		st.Annotations = maps.Clone(st.Annotations)
	}
	st.Annotations[AnnotationDecision] = string(b)
}

// revision resolves pa's KPA settings from its annotations and
// config-autoscaler. The tidal class is read as the KPA class it stands in
// for (Knative's annotation validation knows only its own classes).
func (c *Controller) revision(pa *knautoscaling.PodAutoscaler) (kpaconfig.Revision, error) {
	ann := pa.Annotations
	if pa.Class() != knautoscaling.ClassKPA {
		ann = maps.Clone(ann)
		ann[knautoscaling.AnnotationClass] = knautoscaling.ClassKPA
	}
	return kpaconfig.NewRevision(c.cfg.Autoscaler, c.cfg.Deployment, ann, pa.Spec.ContainerConcurrency,
		pa.Spec.Reachability != knautoscaling.ReachabilityUnreachable)
}

// podSelector selects the Revision's pods, as Knative counts them
// (resources.NewPodAccessor with the revision label).
func podSelector(pa *knautoscaling.PodAutoscaler) labels.Selector {
	return labels.SelectorFromSet(labels.Set{knautoscaling.LabelRevision: pa.Revision()})
}

// reconcile converges pa's ServerlessService, status and target, as
// Knative's KPA reconciler does (kpa.go ReconcileKind), with the rules of
// actuator/kparules. Status is written once, first, at the resourceVersion
// pa was read at, carrying the decision the target is about to follow; then
// the target and the ServerlessService. dryRun computes and writes nothing.
func (c *Controller) reconcile(ctx context.Context, pa *knautoscaling.PodAutoscaler, decision *autoscalingv1alpha1.PodAutoscalerDecision, dryRun bool) (outcome, error) {
	now := c.clock.Now()
	name := cache.MetaObjectToName(pa)
	var out outcome
	st := pa.Status.DeepCopy()
	st.ObservedGeneration = pa.Generation
	if decision != nil && !dryRun {
		recordDecision(st, decision)
	}
	if decision == nil {
		decision = lastDecision(pa)
	}

	rev, err := c.revision(pa)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrInvalidPodAutoscaler, err)
		return c.refuse(ctx, pa, st, out, err, reasonInvalidSpec, EventInvalidSpec, dryRun, now)
	}
	sks, err := knclient.Get[*knnetworking.ServerlessService](c.sksInformer.GetStore(), pa.Namespace, pa.Name)
	if err != nil {
		return out, err
	}
	if sks != nil && !metav1.IsControlledBy(sks, pa) {
		err := fmt.Errorf("%w: there is an existing ServerlessService %q that we do not own", ErrNotOwned, sks.Name)
		return c.refuse(ctx, pa, st, out, err, reasonNotOwned, EventNotOwned, dryRun, now)
	}
	sel := podSelector(pa)
	ready, err := pods.CountReady(c.podIndexer, pa.Namespace, sel)
	if err != nil {
		return out, err
	}
	if !dryRun {
		c.selectors.Set(name, pa.Namespace, sel)
	}

	in := kparules.Input{
		Revision:               rev,
		Reachability:           reachability(pa.Spec.Reachability),
		ScaleTargetInitialized: st.IsTrue(knautoscaling.ConditionScaleTargetInitialized),
		ServiceNameSet:         pa.Status.ServiceName != "",
		PriorDesiredScale:      pa.Status.DesiredScale,
		ReadyPods:              ready,
		Decider:                kpaspec.Status{DesiredScale: kpaspec.ScaleUnknown},
	}
	in.Active, in.ActiveAge = activeCondition(pa, now)
	if decision != nil {
		in.Decider.DesiredScale = decision.DesiredScale
		if decision.ExcessBurstCapacity != nil {
			in.Decider.ExcessBurstCapacity = *decision.ExcessBurstCapacity
		}
	}
	target := targetOf(pa)
	var sc scale.Scale
	if sks != nil && sks.Status.PrivateServiceName != "" {
		in.SKS = observeSKS(sks, now)
		sc, err = c.scaler.GetScale(ctx, target)
		switch {
		case errors.Is(err, scale.ErrNotFound), errors.Is(err, scale.ErrNoScaleSubresource):
			out.Requeue = c.cfg.TargetRetry
			return c.refuse(ctx, pa, st, out, err, "", EventTargetNotFound, dryRun, now)
		case err != nil:
			return out, err
		}
		in.Replicas = &sc.Replicas
		out.Before, out.After = sc.Replicas, sc.Replicas
	}

	probed := false
	res := kparules.Reconcile(in, func() bool {
		probed = true
		return c.probe.inPath(ctx, pa, st.ServiceName)
	})
	if len(res.Requeue) > 0 {
		out.Requeue = slices.Min(res.Requeue)
	}
	if res.AsyncProbe {
		// Knative starts a background probe every second; the next
		// reconcile probes again instead.
		out.Requeue = minRequeue(out.Requeue, probeRetry)
	}
	if dryRun {
		if res.Patch != nil {
			out.After = *res.Patch
		}
		return out, nil
	}

	// Status.
	c.setStatus(st, pa, sks, &res, now)
	if res.ActiveChanged || !equalScale(pa.Status.DesiredScale, st.DesiredScale) {
		out.Requeue = ownWriteRequeue
	}
	if err := c.writeStatus(ctx, pa, st, res.Patch != nil); err != nil {
		return out, err
	}

	// Target.
	if res.Patch != nil {
		if err := c.scaler.SetReplicas(ctx, target, *res.Patch); err != nil {
			return out, fmt.Errorf("scale %s: %w", target, err)
		}
		out.After, out.Patched = *res.Patch, true
		msg := fmt.Sprintf("%d → %d", sc.Replicas, *res.Patch)
		if decision != nil {
			msg += fmt.Sprintf(" (decision %d: %d", decision.Sequence, decision.DesiredScale)
			if decision.Reason != "" {
				msg += ", " + decision.Reason
			}
			msg += ")"
		}
		if probed && *res.Patch == 0 {
			msg += "; the activator answered the probe"
		}
		c.recorder.Event(ref(pa), corev1.EventTypeNormal, EventScaled, msg)
		c.log.Info("scaled knative revision", zap.String("podautoscaler", name.String()),
			zap.Int32("from", sc.Replicas), zap.Int32("to", *res.Patch))
	}

	// ServerlessService.
	return out, c.reconcileSKS(ctx, pa, sks, res.SKSMode, res.NumActivators)
}

func minRequeue(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

// refuse reports a PodAutoscaler that cannot be reconciled until something
// changes: reason, when set, marks Active False with it (Knative's
// MarkResourceNotOwned and the like); the Event is a Warning, emitted when
// the message is new.
func (c *Controller) refuse(ctx context.Context, pa *knautoscaling.PodAutoscaler, st *knautoscaling.PodAutoscalerStatus, out outcome,
	err error, reason, eventReason string, dryRun bool, now time.Time,
) (outcome, error) {
	out.Refused = err
	if dryRun {
		return out, nil
	}
	msg := err.Error()
	prev := pa.Status.Get(knautoscaling.ConditionReady)
	if reason != "" {
		st.Set(duck.Condition{Type: knautoscaling.ConditionActive, Status: corev1.ConditionFalse, Reason: reason, Message: msg}, now)
		st.DeriveReady(now, knautoscaling.ConditionActive, knautoscaling.ConditionScaleTargetInitialized, knautoscaling.ConditionSKSReady)
	}
	if werr := c.writeStatus(ctx, pa, st, false); werr != nil {
		return out, werr
	}
	if prev == nil || prev.Message != msg || reason == "" {
		c.recorder.Event(ref(pa), corev1.EventTypeWarning, eventReason, msg)
	}
	return out, nil
}

// observeSKS is what the rules read of the ServerlessService.
func observeSKS(sks *knnetworking.ServerlessService, now time.Time) *kparules.SKS {
	o := &kparules.SKS{Mode: kparules.SKSMode(sks.Spec.Mode), PrivateServiceNameSet: sks.Status.PrivateServiceName != ""}
	if o.Mode == "" {
		o.Mode = kparules.SKSServe // Knative's default mode
	}
	if cond := sks.Status.Get(knnetworking.ConditionActivatorEndpoints); cond != nil && cond.Status == corev1.ConditionTrue {
		o.ProxyFor = now.Sub(cond.LastTransitionTime.Time)
	}
	return o
}

// setStatus fills st as Knative's KPA reconciler does (kpa.go
// ReconcileKind and computeStatus).
func (c *Controller) setStatus(st *knautoscaling.PodAutoscalerStatus, pa *knautoscaling.PodAutoscaler, sks *knnetworking.ServerlessService,
	res *kparules.Result, now time.Time,
) {
	as := res.ActualScale
	st.ActualScale = &as
	if res.DesiredScale >= 0 || pa.Status.DesiredScale == nil || *pa.Status.DesiredScale < 0 {
		ds := res.DesiredScale
		st.DesiredScale = &ds
	}
	sksReady := duck.Condition{Type: knautoscaling.ConditionSKSReady, Status: corev1.ConditionUnknown, Reason: reasonSKSNotReady,
		Message: messageNoPrivateService}
	if sks != nil && sks.Status.PrivateServiceName != "" {
		st.MetricsServiceName = sks.Status.PrivateServiceName
		st.ServiceName = sks.Status.ServiceName
		if r := sks.Status.Get(knnetworking.ConditionReady); r != nil && r.Status == corev1.ConditionTrue {
			sksReady = duck.Condition{Type: knautoscaling.ConditionSKSReady, Status: corev1.ConditionTrue}
		} else if r != nil {
			sksReady.Message = r.Message
		} else {
			sksReady.Message = ""
		}
	}
	st.Set(sksReady, now)
	if res.ScaleTargetInitialized {
		st.Set(duck.Condition{Type: knautoscaling.ConditionScaleTargetInitialized, Status: corev1.ConditionTrue}, now)
	} else if st.Get(knautoscaling.ConditionScaleTargetInitialized) == nil {
		st.Set(duck.Condition{Type: knautoscaling.ConditionScaleTargetInitialized, Status: corev1.ConditionUnknown}, now)
	}
	active := duck.Condition{Type: knautoscaling.ConditionActive, Status: corev1.ConditionStatus(res.Active.Status),
		Reason: res.Active.Reason, Message: res.Active.Message}
	if res.ActiveChanged || st.Get(knautoscaling.ConditionActive) == nil {
		st.Set(active, now)
	} else if old := st.Get(knautoscaling.ConditionActive); old != nil {
		// Unchanged by the rules' reading (a message alone may differ):
		// keep the transition time the rules' timers run from.
		at := old.LastTransitionTime
		*old = active
		old.LastTransitionTime = at
	}
	st.DeriveReady(now, knautoscaling.ConditionActive, knautoscaling.ConditionScaleTargetInitialized, knautoscaling.ConditionSKSReady)
}

// activeCondition reads the Active condition and its age; a new
// PodAutoscaler is Activating since its creation.
func activeCondition(pa *knautoscaling.PodAutoscaler, now time.Time) (kparules.Condition, time.Duration) {
	cond := pa.Status.Get(knautoscaling.ConditionActive)
	if cond == nil {
		return kparules.Condition{Status: kparules.ConditionUnknown}, now.Sub(pa.CreationTimestamp.Time)
	}
	return kparules.Condition{Status: kparules.ConditionStatus(cond.Status), Reason: cond.Reason, Message: cond.Message},
		now.Sub(cond.LastTransitionTime.Time)
}

func reachability(r knautoscaling.Reachability) kparules.Reachability {
	switch r {
	case knautoscaling.ReachabilityReachable:
		return kparules.Reachable
	case knautoscaling.ReachabilityUnreachable:
		return kparules.Unreachable
	}
	return kparules.ReachabilityUnknown
}

func equalScale(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// writeStatus writes st if it differs from pa's status (or always, with
// force), at the resourceVersion pa was read at, through the status
// subresource, and remembers the write.
func (c *Controller) writeStatus(ctx context.Context, pa *knautoscaling.PodAutoscaler, st *knautoscaling.PodAutoscalerStatus, force bool) error {
	if !force && equality.Semantic.DeepEqual(&pa.Status, st) {
		return nil
	}
	if pa.ResourceVersion == "" {
		return fmt.Errorf("update status of knative podautoscaler %s/%s: no resourceVersion to write at", pa.Namespace, pa.Name)
	}
	upd := pa.DeepCopy()
	upd.Status = *st
	wctx, cancel := scale.Finishing(ctx) // the scale it records may be done already
	defer cancel()
	updated, err := c.client.PodAutoscalers(pa.Namespace).UpdateStatus(wctx, upd, metav1.UpdateOptions{FieldManager: scale.FieldManager})
	if err != nil {
		return fmt.Errorf("update status of knative podautoscaler %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	c.written.Put(cache.MetaObjectToName(updated), updated.ResourceVersion, updated)
	*pa = *updated
	return nil
}

// desiredSKS is the ServerlessService of pa as Knative's MakeSKS builds it
// (pkg/reconciler/autoscaling/resources/sks.go): named like pa, its labels,
// of its annotations only the metric one, controlled by it.
func desiredSKS(pa *knautoscaling.PodAutoscaler, mode kparules.SKSMode, numActivators int32) *knnetworking.ServerlessService {
	sks := &knnetworking.ServerlessService{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pa.Name,
			Namespace:       pa.Namespace,
			Labels:          maps.Clone(pa.Labels),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pa, knautoscaling.Kind)},
		},
		Spec: knnetworking.ServerlessServiceSpec{
			Mode:          knnetworking.Mode(mode),
			ObjectRef:     pa.Spec.ScaleTargetRef,
			ProtocolType:  string(pa.Spec.ProtocolType),
			NumActivators: numActivators,
		},
	}
	if m, ok := pa.Annotations[kpaconfig.AnnotationMetric]; ok {
		sks.Annotations = map[string]string{kpaconfig.AnnotationMetric: m}
	}
	return sks
}

// reconcileSKS creates pa's ServerlessService or brings its spec to mode
// and numActivators.
func (c *Controller) reconcileSKS(ctx context.Context, pa *knautoscaling.PodAutoscaler, have *knnetworking.ServerlessService,
	mode kparules.SKSMode, numActivators int32,
) error {
	want := desiredSKS(pa, mode, numActivators)
	client := c.client.ServerlessServices(pa.Namespace)
	if have == nil {
		_, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: scale.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create serverlessservice %s/%s: the cache is behind: %w", pa.Namespace, pa.Name, err)
		}
		if err != nil {
			return fmt.Errorf("create serverlessservice %s/%s: %w", pa.Namespace, pa.Name, err)
		}
		c.recorder.Eventf(ref(pa), corev1.EventTypeNormal, EventCreated, "created ServerlessService %q in %s mode", want.Name, mode)
		return nil
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return nil
	}
	upd := have.DeepCopy()
	upd.Spec = want.Spec
	if _, err := client.Update(ctx, upd, metav1.UpdateOptions{FieldManager: scale.FieldManager}); err != nil {
		return fmt.Errorf("update serverlessservice %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	return nil
}
