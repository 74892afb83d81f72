// Package knative is the actuator's reconciler of Knative Serving's
// PodAutoscalers (autoscaling.internal.knative.dev/v1alpha1) of the classes
// it is given: tidal in place of Knative's own KPA reconciler
// (knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/kpa). Per
// PodAutoscaler it creates and owns the ServerlessService named like it,
// chooses its mode and activator count, scales the Revision's Deployment
// through /scale, probes the activator before the last pod goes, and writes
// the status Knative's revision reconciler reads (serviceName,
// metricsServiceName, desiredScale, actualScale, the Active,
// ScaleTargetInitialized and SKSReady conditions and Ready from them,
// observedGeneration). The rules are actuator/kparules, the same pure
// functions tidal's own PodAutoscaler controller runs; decisions arrive
// through the Scale RPC, as for tidal's PodAutoscalers.
//
// Knative's controller keeps reconciling the ServerlessService into its
// Services and writes its status; Knative's Metric objects, which only
// Knative's autoscaler reads, are not written.
package knative

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/overlay"
	"github.com/tidalscale/tidal/actuator/scale"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/targetkey"
)

// Config configures the controller.
type Config struct {
	// Classes are the PodAutoscaler classes reconciled; empty means
	// Knative's KPA class alone.
	Classes []string
	// Autoscaler is config-autoscaler; Deployment is config-deployment.
	Autoscaler kpaconfig.Config
	Deployment kpaconfig.DeploymentConfig
	// Workers is the number of reconcile workers.
	Workers int
	// Resync is the informers' resync period; 0 means none.
	Resync time.Duration
	// TargetRetry is how long to wait before looking again for a missing
	// scale target.
	TargetRetry time.Duration
	// ClusterDomain is the suffix of Service host names the activator probe
	// dials ("cluster.local").
	ClusterDomain string
	// ProbeTransport carries the activator probes; nil means a plain HTTP
	// transport. ProbeTimeout bounds one probe.
	ProbeTransport http.RoundTripper
	ProbeTimeout   time.Duration
	// queueClock drives the workqueue's delays (tests step a fake one).
	queueClock clock.WithTicker
}

// targetScaler reads and writes targets' scale subresources.
type targetScaler interface {
	GetScale(ctx context.Context, t scale.Target) (scale.Scale, error)
	SetReplicas(ctx context.Context, t scale.Target, replicas int32) error
}

// indexTarget indexes the PodAutoscalers reconciled here by scale target.
const indexTarget = "scaleTarget"

// lockStripes is the number of reconcile locks PodAutoscalers share.
const lockStripes = 1024

// podEventDelay gathers a scale change's pod readiness changes into one
// reconcile (as tidal's PodAutoscaler controller does).
const podEventDelay = 2 * time.Second

// Controller reconciles Knative PodAutoscalers of its classes.
type Controller struct {
	cfg    Config
	log    *zap.Logger
	clock  clock.PassiveClock
	client knclient.Interface
	scaler targetScaler

	paInformer  cache.SharedIndexInformer
	sksInformer cache.SharedIndexInformer
	podIndexer  cache.Indexer
	// informers are the informer goroutines Run starts and waits for.
	informers sync.WaitGroup

	*controller.Controller
	recorder record.EventRecorder
	probe    *prober

	locks [lockStripes]sync.Mutex
	seed  maphash.Seed
	// written holds the PodAutoscalers this process wrote the cache has
	// not delivered yet (see actuator/overlay).
	written *overlay.Overlay[cache.ObjectName, *knautoscaling.PodAutoscaler]
	// selectors maps pods to the PodAutoscalers of their Revisions.
	selectors *pods.Selectors[cache.ObjectName]
}

// New returns a Controller. It creates the informers of Knative's objects,
// which Run runs, and registers on the pod informer of kubeInformers, which
// the caller starts.
func New(cfg Config, log *zap.Logger, client knclient.Interface, kubeInformers informers.SharedInformerFactory,
	scaler targetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	return newController(cfg, log, clock.RealClock{}, client, kubeInformers, scaler, recorder)
}

func newController(cfg Config, log *zap.Logger, clk clock.PassiveClock, client knclient.Interface, kubeInformers informers.SharedInformerFactory,
	scaler targetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	if len(cfg.Classes) == 0 {
		cfg.Classes = []string{knautoscaling.ClassKPA}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.TargetRetry <= 0 {
		cfg.TargetRetry = 10 * time.Second
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	c := &Controller{
		cfg:         cfg,
		log:         log,
		clock:       clk,
		client:      client,
		scaler:      scaler,
		paInformer:  knclient.NewPodAutoscalerInformer(client, cfg.Resync),
		sksInformer: knclient.NewServerlessServiceInformer(client, cfg.Resync),
		recorder:    recorder,
		probe:       newProber(cfg.ProbeTransport, cfg.ProbeTimeout, cfg.ClusterDomain),
		seed:        maphash.MakeSeed(),
		written:     overlay.New[cache.ObjectName, *knautoscaling.PodAutoscaler](),
		selectors:   pods.NewSelectors[cache.ObjectName](),
	}
	if err := c.paInformer.AddIndexers(cache.Indexers{indexTarget: c.targetIndex}); err != nil {
		return nil, fmt.Errorf("knative podautoscaler target index: %w", err)
	}
	podInformer := kubeInformers.Core().V1().Pods().Informer()
	// The pod informer may be shared with tidal's own PodAutoscaler
	// controller, which trims and indexes it the same way.
	if err := podInformer.SetTransform(pods.Trim); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if _, ok := podInformer.GetIndexer().GetIndexers()[pods.IndexLabel]; !ok {
		if err := pods.AddLabelIndex(podInformer); err != nil {
			return nil, fmt.Errorf("pod label index: %w", err)
		}
	}
	c.podIndexer = podInformer.GetIndexer()
	c.Controller = controller.New(controller.Config{Name: "knative-podautoscaler", Workers: cfg.Workers, RetryQPS: 50, RetryBurst: 300, Clock: cfg.queueClock},
		log, c.sync, c.paInformer.HasSynced, c.sksInformer.HasSynced, podInformer.HasSynced)

	_, err := c.paInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueuePA,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*knautoscaling.PodAutoscaler), cur.(*knautoscaling.PodAutoscaler)
			if o.ResourceVersion == n.ResourceVersion || !c.mine(o) && !c.mine(n) {
				return
			}
			// The echo of our own write holds what we just reconciled.
			if c.mine(o) == c.mine(n) && c.written.Own(cache.MetaObjectToName(n), n.ResourceVersion) {
				return
			}
			c.Enqueue(cur)
		},
		DeleteFunc: c.Enqueue,
	})
	if err != nil {
		return nil, err
	}
	_, err = c.sksInformer.AddEventHandler(controller.Handler(c.EnqueueOwner(knautoscaling.Kind), nil))
	if err != nil {
		return nil, err
	}
	_, err = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
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

// Run runs the informers of Knative's objects and the workers until ctx
// ends, and returns once all have stopped.
func (c *Controller) Run(ctx context.Context) error {
	for _, inf := range []cache.SharedIndexInformer{c.paInformer, c.sksInformer} {
		c.informers.Go(func() { inf.RunWithContext(ctx) })
	}
	defer c.informers.Wait()
	return c.Controller.Run(ctx)
}

// SetOwnership shares the PodAutoscalers among actuator replicas.
func (c *Controller) SetOwnership(owner controller.OwnerFunc) { c.Set(owner) }

// Resync queues every PodAutoscaler this replica owns.
func (c *Controller) Resync() { c.Controller.Resync(c.paInformer.GetStore()) }

// mine reports whether pa is of a class this controller reconciles.
func (c *Controller) mine(pa *knautoscaling.PodAutoscaler) bool {
	return slices.Contains(c.cfg.Classes, pa.Class())
}

func (c *Controller) enqueuePA(obj any) {
	if pa, ok := obj.(*knautoscaling.PodAutoscaler); ok && !c.mine(pa) {
		return
	}
	c.Enqueue(obj)
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

// targetIndex keys the PodAutoscalers of this controller's classes by their
// target's identity (targetkey.Of), the way Scale looks targets up.
func (c *Controller) targetIndex(obj any) ([]string, error) {
	pa, ok := obj.(*knautoscaling.PodAutoscaler)
	if !ok || !c.mine(pa) {
		return nil, nil
	}
	t := targetOf(pa)
	if _, err := t.GroupVersionKind(); err != nil {
		return nil, nil //nolint:nilerr // a malformed apiVersion is reported by reconcile
	}
	return []string{targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind)}, nil
}

func targetOf(pa *knautoscaling.PodAutoscaler) scale.Target {
	r := pa.Spec.ScaleTargetRef
	return scale.Target{Namespace: pa.Namespace, Name: r.Name, APIVersion: r.APIVersion, Kind: r.Kind}
}

func (c *Controller) lock(name cache.ObjectName) func() {
	mu := &c.locks[maphash.String(c.seed, name.Namespace+"/"+name.Name)%lockStripes]
	mu.Lock()
	return mu.Unlock
}

// ref is pa as an Event's involved object: the recorder's scheme does not
// know Knative's kinds.
func ref(pa *knautoscaling.PodAutoscaler) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: knautoscaling.Kind.Kind, APIVersion: knautoscaling.SchemeGroupVersion.String(),
		Namespace: pa.Namespace, Name: pa.Name, UID: pa.UID, ResourceVersion: pa.ResourceVersion}
}

// current returns pa as this process last saw it (the cache, or our newer
// write); nil when it does not exist.
func (c *Controller) current(name cache.ObjectName) (*knautoscaling.PodAutoscaler, error) {
	pa, err := knclient.Get[*knautoscaling.PodAutoscaler](c.paInformer.GetStore(), name.Namespace, name.Name)
	if err != nil {
		return nil, err
	}
	if pa == nil {
		c.written.Delete(name)
		return nil, nil
	}
	if w, ok := c.written.Newer(name, pa.ResourceVersion); ok {
		return w, nil
	}
	return pa, nil
}

// refresh reads name from the API server after a write conflicted.
func (c *Controller) refresh(ctx context.Context, name cache.ObjectName) error {
	pa, err := c.client.PodAutoscalers(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get knative podautoscaler %s: %w", name, err)
	}
	c.written.Put(name, pa.ResourceVersion, pa)
	return nil
}
