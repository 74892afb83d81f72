package knative

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// AnnotationDecision, in a PodAutoscaler's status.annotations, records the
// last decision applied to it (JSON of tidal's PodAutoscalerDecision), as
// tidal's own PodAutoscaler records it in status.lastDecision: a decision
// older than it is refused, across restarts and replicas.
const AnnotationDecision = autoscalingv1alpha1.AnnotationDecision

// maxReason bounds the decision reason kept in status.
const maxReason = 256

// Event reasons.
const (
	EventScaled         = "Scaled"
	EventStaleDecision  = podautoscaler.EventStaleDecision
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

// ErrNotOwned is returned when the ServerlessService of a PodAutoscaler's
// name exists and another object controls it.
var ErrNotOwned = errors.New("serverlessservice not owned by the podautoscaler")

// lastDecision reads the decision recorded in pa's status; nil when none
// (or when what is there does not parse: the next decision replaces it).
func lastDecision(pa *knautoscaling.PodAutoscaler) *autoscalingv1alpha1.PodAutoscalerDecision {
	return autoscalingv1alpha1.DecisionFromAnnotations(pa.Status.Annotations)
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
	if st.Annotations = maps.Clone(st.Annotations); st.Annotations == nil {
		st.Annotations = map[string]string{}
	}
	st.Annotations[AnnotationDecision] = string(b)
}

// revision resolves pa's KPA settings from its annotations and
// config-autoscaler. The tidal class is read as the KPA class it stands in
// for (Knative's annotation validation knows only its own classes).
func (k *kind) Revision(pa *knautoscaling.PodAutoscaler) (kpaconfig.Revision, error) {
	ann := pa.Annotations
	if pa.Class() != knautoscaling.ClassKPA {
		ann = maps.Clone(ann)
		ann[knautoscaling.AnnotationClass] = knautoscaling.ClassKPA
	}
	as, dep := k.cfg.KPA()
	return kpaconfig.NewRevision(as, dep, ann, pa.Spec.ContainerConcurrency,
		pa.Spec.Reachability != knautoscaling.ReachabilityUnreachable)
}

type pass = podautoscaler.Pass[*knautoscaling.PodAutoscaler, *knnetworking.ServerlessService]

// Observe reads the ServerlessService, the Revision's pods and, once the
// ServerlessService has its private Service, the target's scale, as
// Knative's KPA reconciler does (kpa.go ReconcileKind).
func (k *kind) Observe(ctx context.Context, p *pass) error {
	pa, st := p.PA, &p.Next.Status
	st.ObservedGeneration = pa.Generation
	if p.Record != nil {
		recordDecision(st, p.Record)
	}
	rev, err := k.Revision(pa)
	if err != nil {
		return refuse(p, reasonInvalidSpec, EventInvalidSpec, fmt.Errorf("%w: %w", podautoscaler.ErrInvalidPodAutoscaler, err), false)
	}
	sks, err := knclient.Get[*knnetworking.ServerlessService](k.sksInformer.GetStore(), pa.Namespace, pa.Name)
	if err != nil {
		return err
	}
	if sks != nil && !metav1.IsControlledBy(sks, pa) {
		err := fmt.Errorf("%w: there is an existing ServerlessService %q that we do not own", ErrNotOwned, sks.Name)
		return refuse(p, reasonNotOwned, EventNotOwned, err, false)
	}
	p.Companion = sks
	// The Revision's pods, as Knative counts them (resources.NewPodAccessor
	// with the revision label).
	p.Selector = labels.SelectorFromSet(labels.Set{knautoscaling.LabelRevision: pa.Revision()})
	p.Input = kparules.Input{
		Revision:               rev,
		Reachability:           kparules.ReachabilityOf(string(pa.Spec.Reachability)),
		ScaleTargetInitialized: pa.Status.IsTrue(knautoscaling.ConditionScaleTargetInitialized),
		ServiceNameSet:         pa.Status.ServiceName != "",
		PriorDesiredScale:      pa.Status.DesiredScale,
		Decider:                p.Input.Decider,
	}
	p.Input.Active, p.Input.ActiveAge = activeCondition(pa, p.Now)
	if sks != nil && sks.Status.PrivateServiceName != "" {
		p.Input.SKS = observeSKS(sks, p.Now)
		p.Scale, err = k.scaler.GetScale(ctx, p.Target)
		switch {
		case errors.Is(err, scale.ErrNotFound), errors.Is(err, scale.ErrNoScaleSubresource):
			return refuse(p, "", EventTargetNotFound, err, true)
		case err != nil:
			return err
		}
		p.Input.Replicas = &p.Scale.Replicas
	}
	p.Probe = func() bool { return k.probe.inPath(ctx, pa, pa.Status.ServiceName) }
	return nil
}

// refuse reports a PodAutoscaler that cannot be reconciled until something
// changes: reason, when set, marks Active False with it (Knative's
// MarkResourceNotOwned and the like); the Warning is reported when its
// message is new, or always when nothing in status says it.
func refuse(p *pass, reason, event string, err error, retry bool) error {
	msg := err.Error()
	prev := p.PA.Status.Get(knautoscaling.ConditionReady)
	if st := &p.Next.Status; reason != "" {
		st.Set(duck.Condition{Type: knautoscaling.ConditionActive, Status: corev1.ConditionFalse, Reason: reason, Message: msg}, p.Now)
		st.DeriveReady(p.Now, knautoscaling.ConditionActive, knautoscaling.ConditionScaleTargetInitialized, knautoscaling.ConditionSKSReady)
	}
	return &podautoscaler.Refusal{Err: err, Event: event, Retry: retry, Report: prev == nil || prev.Message != msg || reason == ""}
}

// Message is the Scaled Event's: the change, the decision it follows, and
// the probe's answer before the last pod went.
func (k *kind) Message(p *pass, to int32) string {
	msg := fmt.Sprintf("%d → %d", p.Scale.Replicas, to)
	if d := p.Decision; d != nil {
		msg += fmt.Sprintf(" (decision %d: %d", d.Sequence, d.DesiredScale)
		if d.Reason != "" {
			msg += ", " + d.Reason
		}
		msg += ")"
	}
	if p.Probed && to == 0 {
		msg += "; the activator answered the probe"
	}
	return msg
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

// SetStatus fills the status as Knative's KPA reconciler does (kpa.go
// ReconcileKind and computeStatus).
func (k *kind) SetStatus(p *pass) *int32 {
	st, pa, sks, res, now := &p.Next.Status, p.PA, p.Companion, &p.Result, p.Now
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
	if old := st.Get(knautoscaling.ConditionActive); res.ActiveChanged || old == nil {
		st.Set(active, now)
	} else {
		// Unchanged by the rules' reading (a message alone may differ):
		// keep the transition time the rules' timers run from.
		active.LastTransitionTime = old.LastTransitionTime
		*old = active
	}
	st.DeriveReady(now, knautoscaling.ConditionActive, knautoscaling.ConditionScaleTargetInitialized, knautoscaling.ConditionSKSReady)
	return st.DesiredScale
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

// Converge creates the ServerlessService or brings it to the rules' mode
// and activator count.
func (k *kind) Converge(ctx context.Context, p *pass) error {
	pa, have, mode := p.PA, p.Companion, p.Result.SKSMode
	want := desiredSKS(pa, mode, p.Result.NumActivators)
	client := k.client.ServerlessServices(pa.Namespace)
	if have == nil {
		_, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: scale.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create serverlessservice %s/%s: the cache is behind: %w", pa.Namespace, pa.Name, err)
		}
		if err != nil {
			return fmt.Errorf("create serverlessservice %s/%s: %w", pa.Namespace, pa.Name, err)
		}
		k.recorder.Eventf(podautoscaler.EventRef(knautoscaling.Kind, pa), corev1.EventTypeNormal, EventCreated, "created ServerlessService %q in %s mode", want.Name, mode)
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
