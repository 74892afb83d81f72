// Package podautoscaler is the actuator's PodAutoscaler controller: it keeps
// each PodAutoscaler's Metric, applies Knative's KPA reconciler rules
// (knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/kpa, the pure functions of
// actuator/kparules) to the
// deciders' latest desired scale, patches the target's scale subresource,
// writes status and emits an Event for every scale change. Decisions arrive
// through Scale (the deciders' RPC); the controller's informers and
// workqueue re-run the same reconcile on every change and on the requeues
// scale-to-zero timing needs, so nothing reaches a target without passing
// the rules.
package podautoscaler

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/overlay"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalscheme "github.com/tidalscale/tidal/apis/generated/clientset/versioned/scheme"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	autoscalinglisters "github.com/tidalscale/tidal/apis/generated/listers/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/targetkey"
)

// Config configures the controller.
type Config struct {
	// Autoscaler is config-autoscaler; Deployment is config-deployment.
	Autoscaler kpaconfig.Config
	Deployment kpaconfig.DeploymentConfig
	// Workers is the number of reconcile workers.
	Workers int
	// TargetRetry is how long to wait before looking again for a missing
	// scale target.
	TargetRetry time.Duration
	// queueClock drives the workqueue's delays (tests step a fake one);
	// nil means the real clock.
	queueClock clock.WithTicker
}

// targetScaler reads and writes targets' scale subresources.
type targetScaler interface {
	GetScale(ctx context.Context, t scale.Target) (scale.Scale, error)
	SetReplicas(ctx context.Context, t scale.Target, replicas int32) error
}

// indexTarget indexes PodAutoscalers by their scale target.
const indexTarget = "scaleTarget"

// Controller reconciles PodAutoscalers.
type Controller struct {
	cfg    Config
	log    *zap.Logger
	clock  clock.PassiveClock
	tidal  tidalclient.Interface
	scaler targetScaler

	paInformer cache.SharedIndexInformer
	pas        autoscalinglisters.PodAutoscalerLister
	metrics    autoscalinglisters.MetricLister

	// Controller is the workqueue and its workers (Run, HasSynced), and
	// which PodAutoscalers this replica reconciles.
	*controller.Controller
	recorder record.EventRecorder
	// plain applies decisions for targets no PodAutoscaler names.
	plain *scale.Applier

	// locks serialises reconciles of one PodAutoscaler between the workers
	// and Scale calls; a PodAutoscaler takes the stripe its name hashes to,
	// so the set is bounded and no lock is ever freed while held.
	locks [lockStripes]sync.Mutex
	seed  maphash.Seed

	// written holds the PodAutoscalers this process wrote that the
	// informer has not delivered yet: reads see them at once, and their
	// watch events are known as echoes of our own writes.
	written *overlay.Overlay[cache.ObjectName, *autoscalingv1alpha1.PodAutoscaler]
	// podIndexer is the pod cache, indexed by label.
	podIndexer cache.Indexer
	// selectors maps pods to the PodAutoscalers whose targets select them.
	selectors *pods.Selectors[cache.ObjectName]
}

// SetOwnership shares the PodAutoscalers among actuator replicas: owner
// names the replica that reconciles each one. Call Resync when this replica
// gains or loses PodAutoscalers.
func (c *Controller) SetOwnership(owner controller.OwnerFunc) { c.Set(owner) }

// owns reports whether this replica reconciles name, and who does if not.
func (c *Controller) owns(name cache.ObjectName) (string, bool) { return c.Owns(name) }

// Resync queues every PodAutoscaler this replica owns, after a change of
// ownership.
func (c *Controller) Resync() { c.Controller.Resync(c.paInformer.GetStore()) }

// lockStripes is the number of reconcile locks PodAutoscalers share.
const lockStripes = 1024

// podEventDelay gathers the readiness changes of a scale-up or scale-down
// (pods turn ready one by one, over about a tick) into one reconcile and one
// status write: at thousands of targets, status writes for actualScale were
// half of the actuator's API writes.
const podEventDelay = 2 * time.Second

// New returns a Controller. It registers its event handlers on the
// informers; the caller starts the informers (and factory) and then Run.
func New(cfg Config, log *zap.Logger, tidal tidalclient.Interface,
	tidalInformers tidalinformers.SharedInformerFactory, kubeInformers informers.SharedInformerFactory, scaler targetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	return newController(cfg, log, clock.RealClock{}, tidal, tidalInformers, kubeInformers, scaler, recorder)
}

// NewEventRecorder returns a recorder writing Events as tidal-actuator, and
// its broadcaster, which the caller shuts down. Every distinct scale change
// is kept: the correlator allows bursts of 100 per object and never folds
// distinct messages into "combined from similar events".
func NewEventRecorder(kube kubernetes.Interface) (record.EventRecorder, record.EventBroadcaster) {
	broadcaster := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: 100,
		QPS:       1,
		KeyFunc: func(e *corev1.Event) (string, string) {
			k := e.Source.Component + "/" + e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name + "/" +
				string(e.InvolvedObject.UID) + "/" + e.Reason + "/" + e.Message
			return k, e.Message
		},
	}))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(tidalscheme.Scheme, corev1.EventSource{Component: "tidal-actuator"}), broadcaster
}

func newController(cfg Config, log *zap.Logger, clk clock.PassiveClock, tidal tidalclient.Interface,
	tidalInformers tidalinformers.SharedInformerFactory, kubeInformers informers.SharedInformerFactory, scaler targetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.TargetRetry <= 0 {
		cfg.TargetRetry = 10 * time.Second
	}
	paInformer := tidalInformers.Autoscaling().V1alpha1().PodAutoscalers()
	metricInformer := tidalInformers.Autoscaling().V1alpha1().Metrics()
	if err := paInformer.Informer().AddIndexers(cache.Indexers{indexTarget: targetIndex}); err != nil {
		return nil, fmt.Errorf("podautoscaler target index: %w", err)
	}
	podInformer := kubeInformers.Core().V1().Pods()
	if err := podInformer.Informer().SetTransform(pods.Trim); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if err := pods.AddLabelIndex(podInformer.Informer()); err != nil {
		return nil, fmt.Errorf("pod label index: %w", err)
	}
	c := &Controller{
		cfg:        cfg,
		log:        log,
		clock:      clk,
		tidal:      tidal,
		scaler:     scaler,
		paInformer: paInformer.Informer(),
		pas:        paInformer.Lister(),
		metrics:    metricInformer.Lister(),
		podIndexer: podInformer.Informer().GetIndexer(),
		recorder:   recorder,
		seed:       maphash.MakeSeed(),
		written:    overlay.New[cache.ObjectName, *autoscalingv1alpha1.PodAutoscaler](),
		selectors:  pods.NewSelectors[cache.ObjectName](),
	}
	c.Controller = controller.New(controller.Config{Name: "podautoscaler", Workers: cfg.Workers, RetryQPS: 50, RetryBurst: 300, Clock: cfg.queueClock},
		log, c.sync, paInformer.Informer().HasSynced, metricInformer.Informer().HasSynced, podInformer.Informer().HasSynced)
	if fs, ok := scaler.(scale.Scaler); ok {
		c.plain = scale.New(fs, clk.Now)
	}

	_, err := paInformer.Informer().AddEventHandler(controller.Handler(c.Enqueue, func(_, cur metav1.Object) bool {
		// The echo of our own write holds what we just reconciled.
		return c.written.Own(cache.ObjectName{Namespace: cur.GetNamespace(), Name: cur.GetName()}, cur.GetResourceVersion())
	}))
	if err != nil {
		return nil, err
	}
	// A Metric maps to the PodAutoscaler controlling it.
	_, err = metricInformer.Informer().AddEventHandler(controller.Handler(
		c.EnqueueOwner(autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler")), nil))
	if err != nil {
		return nil, err
	}
	// A pod maps to the PodAutoscalers whose targets select it: readiness
	// changes move actualScale and the Active condition.
	_, err = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueuePod,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Pod), cur.(*corev1.Pod)
			if o.ResourceVersion != n.ResourceVersion && pods.Ready(o) != pods.Ready(n) {
				c.enqueuePod(cur)
			}
		},
		DeleteFunc: c.enqueuePod,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// targetIndex keys a PodAutoscaler by namespace, kind, group and name of its
// target, the way Scale looks targets up.
func targetIndex(obj any) ([]string, error) {
	pa, ok := obj.(*autoscalingv1alpha1.PodAutoscaler)
	if !ok {
		return nil, nil
	}
	t := targetOf(pa)
	k, err := targetKey(t)
	if err != nil {
		return nil, nil //nolint:nilerr // a malformed apiVersion is reported by reconcile
	}
	return []string{k}, nil
}

// targetKey is t's identity as every service spells it (targetkey.Of),
// for a well-formed apiVersion.
func targetKey(t scale.Target) (string, error) {
	if _, err := t.GroupVersionKind(); err != nil {
		return "", err
	}
	return targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind), nil
}

func targetOf(pa *autoscalingv1alpha1.PodAutoscaler) scale.Target {
	r := pa.Spec.ScaleTargetRef
	return scale.Target{Namespace: pa.Namespace, Name: r.Name, APIVersion: r.APIVersion, Kind: r.Kind}
}

func (c *Controller) enqueuePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.selectors.Matching(pod.Namespace, pod.Labels, func(name cache.ObjectName) { c.AddAfter(name, podEventDelay) })
}

func (c *Controller) lock(name cache.ObjectName) func() {
	mu := &c.locks[maphash.String(c.seed, name.Namespace+"/"+name.Name)%lockStripes]
	mu.Lock()
	return mu.Unlock
}
