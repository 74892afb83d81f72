package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalscheme "github.com/tidalscale/tidal/apis/generated/clientset/versioned/scheme"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	autoscalinglisters "github.com/tidalscale/tidal/apis/generated/listers/autoscaling/v1alpha1"
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

// Config configures a PodAutoscaler controller, tidal's or Knative's.
type Config struct {
	// Autoscaler is config-autoscaler; Deployment is config-deployment.
	Autoscaler kpaconfig.Config
	Deployment kpaconfig.DeploymentConfig
	// Live, when set, returns the two in effect now (Knative's ConfigMaps,
	// followed by knativeconfig) in place of Autoscaler and Deployment.
	Live func() (kpaconfig.Config, kpaconfig.DeploymentConfig)
	// Workers is the number of reconcile workers.
	Workers int
	// TargetRetry is how long to wait before looking again for a missing
	// scale target.
	TargetRetry time.Duration
	// StatusInterval, when above 0, coalesces the writes that report
	// changes: a Scaled Event only when the direction of scaling changes,
	// and, while replicas share PodAutoscalers through Leases (SetOwnership)
	// and this replica made the last status write it knows of, status
	// once its changes pause for an interval and its pods caught up (at
	// most three intervals after the first), with everything applied
	// meanwhile (see writeStatus). 0 records every decision and reports
	// every change at once.
	StatusInterval time.Duration
	// Status, when set, counts status writes by kind and why they were
	// made, and what started the waits of coalesced ones
	// (NewStatusMetrics).
	Status *StatusMetrics
	// Claims, when set, spends the client's API budget by priority
	// (writebudget): a decider's decision waits in the class its change
	// makes (a wake from zero first) and a worker's reconcile as a
	// scale-down, and a newer decision for a PodAutoscaler takes the place
	// of a pass still waiting for the budget. Shared by every kind.
	Claims *writebudget.Claims
	// queueClock drives the workqueue's delays (tests step a fake one);
	// nil means the real clock.
	queueClock clock.WithTicker
}

// KPA returns config-autoscaler and config-deployment as in effect now.
func (c Config) KPA() (kpaconfig.Config, kpaconfig.DeploymentConfig) {
	if c.Live != nil {
		return c.Live()
	}
	return c.Autoscaler, c.Deployment
}

// Controller reconciles tidal's PodAutoscalers; the companion object of
// each is its Metric, which the collector reads.
type Controller = Reconciler[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric]

// tidalKind is tidal's PodAutoscaler (spec §6.2): status.lastDecision,
// metav1 conditions, the dry-run and paused annotations, the lag strategy,
// and a Metric per PodAutoscaler.
type tidalKind struct {
	cfg     Config
	tidal   tidalclient.Interface
	scaler  TargetScaler
	pas     autoscalinglisters.PodAutoscalerLister
	metrics autoscalinglisters.MetricLister
}

// New returns the Controller of tidal's PodAutoscalers. It registers its
// event handlers on the informers; the caller starts the informers (and
// factory) and then Run.
func New(cfg Config, log *zap.Logger, tidal tidalclient.Interface,
	tidalInformers tidalinformers.SharedInformerFactory, kubeInformers informers.SharedInformerFactory, scaler TargetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	return newController(cfg, log, clock.RealClock{}, tidal, tidalInformers, kubeInformers, scaler, recorder)
}

func newController(cfg Config, log *zap.Logger, clk clock.PassiveClock, tidal tidalclient.Interface,
	tidalInformers tidalinformers.SharedInformerFactory, kubeInformers informers.SharedInformerFactory, scaler TargetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	paInformer := tidalInformers.Autoscaling().V1alpha1().PodAutoscalers()
	metricInformer := tidalInformers.Autoscaling().V1alpha1().Metrics()
	k := &tidalKind{cfg: cfg, tidal: tidal, scaler: scaler, pas: paInformer.Lister(), metrics: metricInformer.Lister()}
	spec := Spec[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric]{
		Kind:     k,
		Name:     "podautoscaler",
		GVK:      autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler"),
		Informer: paInformer.Informer(),
		Synced:   []cache.InformerSynced{metricInformer.Informer().HasSynced},
		Gone:     k.deleteOrphanMetric,
		Config:   cfg,
	}
	if fs, ok := scaler.(scale.Scaler); ok {
		spec.Fallback = scale.New(fs, clk.Now)
	}
	c, err := NewReconciler(spec, log, clk, kubeInformers.Core().V1().Pods().Informer(), scaler, recorder)
	if err != nil {
		return nil, err
	}
	// A Metric maps to the PodAutoscaler controlling it.
	_, err = metricInformer.Informer().AddEventHandler(controller.Handler(c.EnqueueOwner(spec.GVK), nil))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewEventRecorder returns a recorder writing Events as tidal-actuator, and
// its broadcaster, which the caller shuts down. client-go's correlator
// applies as it does to Kubernetes' own controllers: a repeated Event is a
// count on the first, similar ones (same object and reason) fold into
// "combined from similar events" after ten in ten minutes, and an object
// gets 25 Events at once, then one every five minutes. The correlator
// remembers eventObjects objects, not client-go's 4,096, so that the budget
// holds at 10,000 targets.
func NewEventRecorder(kube kubernetes.Interface) (record.EventRecorder, record.EventBroadcaster) {
	broadcaster := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventObjects}))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(tidalscheme.Scheme, corev1.EventSource{Component: "tidal-actuator"}), broadcaster
}

// eventObjects is how many objects' Event budgets the correlator keeps:
// beyond it the least recent lose theirs (a fresh burst).
const eventObjects = 16384

func (k *tidalKind) Get(name cache.ObjectName) (*autoscalingv1alpha1.PodAutoscaler, error) {
	pa, err := k.pas.PodAutoscalers(name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pa, err
}

func (k *tidalKind) Fetch(ctx context.Context, name cache.ObjectName) (*autoscalingv1alpha1.PodAutoscaler, error) {
	return k.tidal.AutoscalingV1alpha1().PodAutoscalers(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
}

func (k *tidalKind) UpdateStatus(ctx context.Context, pa *autoscalingv1alpha1.PodAutoscaler) (*autoscalingv1alpha1.PodAutoscaler, error) {
	return k.tidal.AutoscalingV1alpha1().PodAutoscalers(pa.Namespace).UpdateStatus(ctx, pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
}

func (k *tidalKind) WithStatus(pa, from *autoscalingv1alpha1.PodAutoscaler) *autoscalingv1alpha1.PodAutoscaler {
	c := pa.DeepCopy()
	from.Status.DeepCopyInto(&c.Status)
	return c
}

func (k *tidalKind) WithDecision(pa *autoscalingv1alpha1.PodAutoscaler, d *Decision) *autoscalingv1alpha1.PodAutoscaler {
	c := pa.DeepCopy()
	c.Status.LastDecision = d.DeepCopy()
	return c
}

func (k *tidalKind) Urgent(pa, next *autoscalingv1alpha1.PodAutoscaler) bool {
	return ConditionsTurned(pa.Status.Conditions, next.Status.Conditions, func(c metav1.Condition) (string, string) {
		return c.Type, string(c.Status)
	})
}

func (k *tidalKind) Target(pa *autoscalingv1alpha1.PodAutoscaler) scale.Target {
	r := pa.Spec.ScaleTargetRef
	return scale.Target{Namespace: pa.Namespace, Name: r.Name, APIVersion: r.APIVersion, Kind: r.Kind}
}

func (k *tidalKind) Decision(pa *autoscalingv1alpha1.PodAutoscaler) *Decision {
	return pa.Status.LastDecision
}

// Revision resolves the PodAutoscaler's KPA settings.
func (k *tidalKind) Revision(pa *autoscalingv1alpha1.PodAutoscaler) (kpaconfig.Revision, error) {
	as, dep := k.cfg.KPA()
	rev, err := kpaconfig.NewRevision(as, dep, pa.Annotations, pa.Spec.ContainerConcurrency,
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

type tidalPass = Pass[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric]

// Observe reads the target's scale (its selector selects the pods) and the
// Metric, from caches.
func (k *tidalKind) Observe(ctx context.Context, p *tidalPass) error {
	pa, st := p.PA, &p.Next.Status
	st.ObservedGeneration = pa.Generation
	st.MetricName = pa.Name
	if p.Record != nil {
		st.LastDecision = p.Record.DeepCopy()
	}
	rev, err := k.Revision(pa)
	if err != nil {
		// Retrying cannot help until the user fixes the object, which
		// triggers a reconcile.
		return refuse(p, ReasonInvalidSpec, EventInvalidSpec, fmt.Errorf("%w: %w", ErrInvalidPodAutoscaler, err), false)
	}
	p.Scale, err = k.scaler.GetScale(ctx, p.Target)
	switch {
	case errors.Is(err, scale.ErrNotFound):
		return refuse(p, ReasonTargetNotFound, EventTargetNotFound, err, true)
	case errors.Is(err, scale.ErrNoScaleSubresource):
		return refuse(p, ReasonNoScale, EventNoScale, err, false)
	case err != nil:
		return err
	}
	p.Selector = labels.Nothing()
	if s := p.Scale.Selector; s != "" {
		if p.Selector, err = labels.Parse(s); err != nil {
			return refuse(p, ReasonNoScale, EventNoScale, fmt.Errorf("target %s: selector %q: %w: %w", p.Target, s, scale.ErrNoScaleSubresource, err), false)
		}
	}
	active, activeAge := activeCondition(pa, p.Now)
	p.Input = kparules.Input{
		Revision:               rev,
		Reachability:           kparules.ReachabilityOf(string(pa.Spec.Reachability)),
		Active:                 active,
		ActiveAge:              activeAge,
		ScaleTargetInitialized: meta.IsStatusConditionTrue(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized),
		ServiceNameSet:         true,
		PriorDesiredScale:      pa.Status.DesiredScale,
		SKS:                    syntheticSKS(pa, p.Input.Decider),
		Replicas:               &p.Scale.Replicas,
		Decider:                p.Input.Decider,
	}
	p.Lag = pa.Spec.Strategy == autoscalingv1alpha1.StrategyLag
	p.Paused, p.Dry = annotationTrue(pa, AnnotationPaused), annotationTrue(pa, AnnotationDryRun)
	return nil
}

// refuse marks the Ready condition False with reason and err's message.
func refuse(p *tidalPass, reason, event string, err error, retry bool) error {
	msg := err.Error()
	prev := meta.FindStatusCondition(p.PA.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionReady)
	setCondition(&p.Next.Status.Conditions, metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionReady,
		Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: p.PA.Generation}, p.Now)
	return &Refusal{Err: err, Event: event, Retry: retry, Report: prev == nil || prev.Reason != reason || prev.Message != msg}
}

// annotationTrue reports whether annotation key parses as true.
func annotationTrue(pa *autoscalingv1alpha1.PodAutoscaler, key string) bool {
	b, _ := strconv.ParseBool(pa.Annotations[key]) // false when absent or malformed
	return b
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
	cond := meta.FindStatusCondition(pa.Status.Conditions, autoscalingv1alpha1.PodAutoscalerConditionActive)
	if cond == nil {
		return kparules.Condition{Status: kparules.ConditionUnknown}, now.Sub(pa.CreationTimestamp.Time)
	}
	reason := cond.Reason
	if cond.Status == metav1.ConditionTrue && reason == ReasonActive {
		reason = ""
	}
	return kparules.Condition{Status: kparules.ConditionStatus(cond.Status), Reason: reason, Message: cond.Message}, now.Sub(cond.LastTransitionTime.Time)
}

// SetStatus fills the status from the rules' result (spec §6.2 step 9).
func (k *tidalKind) SetStatus(p *tidalPass) *int32 {
	st, res, gen, now := &p.Next.Status, &p.Result, p.PA.Generation, p.Now
	if res.DesiredScale >= 0 {
		ds := res.DesiredScale
		st.DesiredScale = &ds
	}
	as := res.ActualScale
	st.ActualScale = &as
	if p.Patch != nil {
		st.LastScaleTime = &metav1.Time{Time: now}
	}
	activeCond := metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionActive, Status: metav1.ConditionStatus(res.Active.Status),
		Reason: res.Active.Reason, Message: res.Active.Message, ObservedGeneration: gen}
	if activeCond.Reason == "" {
		activeCond.Reason = ReasonActive
	}
	if res.ActiveChanged || meta.FindStatusCondition(st.Conditions, activeCond.Type) == nil {
		setConditionAt(&st.Conditions, activeCond, now)
	} else {
		keepTransition(&st.Conditions, activeCond)
	}
	initStatus, initReason := metav1.ConditionFalse, "Initializing"
	if res.ScaleTargetInitialized {
		initStatus, initReason = metav1.ConditionTrue, "Initialized"
	}
	setCondition(&st.Conditions, metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionScaleTargetInitialized,
		Status: initStatus, Reason: initReason, ObservedGeneration: gen}, now)
	readyCond := metav1.Condition{Type: autoscalingv1alpha1.PodAutoscalerConditionReady, Status: metav1.ConditionTrue,
		Reason: ReasonReady, ObservedGeneration: gen}
	switch {
	case p.Paused:
		readyCond.Reason, readyCond.Message = ReasonPaused, fmt.Sprintf("%s is true: the target is held at %d replicas", AnnotationPaused, p.Scale.Replicas)
	case p.Dry:
		readyCond.Reason, readyCond.Message = ReasonDryRun, fmt.Sprintf("%s is true: decisions are recorded, not applied", AnnotationDryRun)
	case !res.ScaleTargetInitialized:
		readyCond.Status, readyCond.Reason = metav1.ConditionUnknown, ReasonInitializing
		readyCond.Message = "waiting for the target to reach its initial scale"
	}
	if p.Held != nil {
		readyCond.Message += fmt.Sprintf("; would scale %d → %d", p.Scale.Replicas, *p.Held)
	}
	setCondition(&st.Conditions, readyCond, now)
	return st.DesiredScale
}

func (k *tidalKind) Message(p *tidalPass, to int32) string {
	rec, hasRec := Decision{}, p.Decision != nil
	if hasRec {
		rec = *p.Decision
	}
	return scaleMessage(rec.Reason, rec.DesiredScale, hasRec, p.Scale.Replicas, to, &p.Input.Revision)
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
	case desired < 0, to > desired:
		return fmt.Sprintf("initial scale %d", to)
	}
	return "scale bounds"
}
