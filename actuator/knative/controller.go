// Package knative is Knative Serving's PodAutoscaler
// (autoscaling.internal.knative.dev/v1alpha1) as a kind of the actuator's
// PodAutoscaler reconciler (actuator/podautoscaler): tidal in place of
// Knative's own KPA reconciler (knative.dev/serving v0.50.0
// pkg/reconciler/autoscaling/kpa), for the classes it is given. Per
// PodAutoscaler it creates and owns the ServerlessService named like it,
// chooses its mode and activator count, probes the activator before the
// last pod goes, and writes the status Knative's revision reconciler reads
// (serviceName, metricsServiceName, desiredScale, actualScale, the Active,
// ScaleTargetInitialized and SKSReady conditions and Ready from them,
// observedGeneration); the reconciler scales the Revision's Deployment
// through /scale with the same rules as tidal's own PodAutoscalers.
//
// Knative's controller keeps reconciling the ServerlessService into its
// Services and writes its status; Knative's Metric objects, which only
// Knative's autoscaler reads, are not written.
package knative

import (
	"context"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
)

// Config configures the controller.
type Config struct {
	// Classes are the PodAutoscaler classes reconciled; empty means
	// Knative's KPA class alone.
	Classes []string
	// Namespaces are the namespaces watched; empty means every one.
	Namespaces []string
	// Config is what tidal's PodAutoscaler controller takes too.
	podautoscaler.Config
	// Resync is the informers' resync period; 0 means none.
	Resync time.Duration
	// ClusterDomain is the suffix of Service host names the activator probe
	// dials ("cluster.local").
	ClusterDomain string
	// ProbeTransport carries the activator probes; nil means a plain HTTP
	// transport. ProbeTimeout bounds one probe.
	ProbeTransport http.RoundTripper
	ProbeTimeout   time.Duration
}

// Controller reconciles the Knative PodAutoscalers of its classes; the
// companion object of each is its ServerlessService.
type Controller = podautoscaler.Reconciler[*knautoscaling.PodAutoscaler, *knnetworking.ServerlessService]

// kind is Knative's PodAutoscaler, for the reconciler.
type kind struct {
	cfg         Config
	client      knclient.Interface
	scaler      podautoscaler.TargetScaler
	recorder    record.EventRecorder
	probe       *prober
	paInformer  cache.SharedIndexInformer
	sksInformer cache.SharedIndexInformer
}

// New returns a Controller. It creates the informers of Knative's objects,
// which Run runs, and registers on the pod informer of kubeInformers, which
// the caller starts.
func New(cfg Config, log *zap.Logger, client knclient.Interface, kubeInformers informers.SharedInformerFactory,
	scaler podautoscaler.TargetScaler, recorder record.EventRecorder,
) (*Controller, error) {
	c, _, err := newController(cfg, log, clock.RealClock{}, client, kubeInformers, scaler, recorder)
	return c, err
}

func newController(cfg Config, log *zap.Logger, clk clock.PassiveClock, client knclient.Interface, kubeInformers informers.SharedInformerFactory,
	scaler podautoscaler.TargetScaler, recorder record.EventRecorder,
) (*Controller, *kind, error) {
	if len(cfg.Classes) == 0 {
		cfg.Classes = []string{knautoscaling.ClassKPA}
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	k := &kind{
		cfg:         cfg,
		client:      client,
		scaler:      scaler,
		recorder:    recorder,
		probe:       newProber(cfg.ProbeTransport, cfg.ProbeTimeout, cfg.ClusterDomain),
		paInformer:  knclient.NewPodAutoscalerInformer(client, cfg.Namespaces, cfg.Resync),
		sksInformer: knclient.NewServerlessServiceInformer(client, cfg.Namespaces, cfg.Resync),
	}
	c, err := podautoscaler.NewReconciler(podautoscaler.Spec[*knautoscaling.PodAutoscaler, *knnetworking.ServerlessService]{
		Kind:       k,
		Name:       "knative podautoscaler",
		GVK:        knautoscaling.Kind,
		Informer:   k.paInformer,
		Handles:    func(pa *knautoscaling.PodAutoscaler) bool { return slices.Contains(cfg.Classes, pa.Class()) },
		Synced:     []cache.InformerSynced{k.sksInformer.HasSynced},
		Run:        []cache.SharedIndexInformer{k.paInformer, k.sksInformer},
		Config:     cfg.Config,
		ProbeRetry: probeRetry,
	}, log, clk, kubeInformers.Core().V1().Pods().Informer(), scaler, recorder)
	if err != nil {
		return nil, nil, err
	}
	if _, err := k.sksInformer.AddEventHandler(controller.Handler(c.EnqueueOwner(knautoscaling.Kind), nil)); err != nil {
		return nil, nil, err
	}
	return c, k, nil
}

func (k *kind) Get(name cache.ObjectName) (*knautoscaling.PodAutoscaler, error) {
	return knclient.Get[*knautoscaling.PodAutoscaler](k.paInformer.GetStore(), name.Namespace, name.Name)
}

func (k *kind) Fetch(ctx context.Context, name cache.ObjectName) (*knautoscaling.PodAutoscaler, error) {
	return k.client.PodAutoscalers(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
}

func (k *kind) UpdateStatus(ctx context.Context, pa *knautoscaling.PodAutoscaler) (*knautoscaling.PodAutoscaler, error) {
	return k.client.PodAutoscalers(pa.Namespace).UpdateStatus(ctx, pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
}

func (k *kind) WithStatus(pa, from *knautoscaling.PodAutoscaler) *knautoscaling.PodAutoscaler {
	c := pa.DeepCopy()
	from.Status.DeepCopyInto(&c.Status)
	return c
}

func (k *kind) WithDecision(pa *knautoscaling.PodAutoscaler, d *podautoscaler.Decision) *knautoscaling.PodAutoscaler {
	c := pa.DeepCopy()
	recordDecision(&c.Status, d)
	return c
}

func (k *kind) Urgent(pa, next *knautoscaling.PodAutoscaler) bool {
	return pa.Status.ServiceName != next.Status.ServiceName || pa.Status.MetricsServiceName != next.Status.MetricsServiceName ||
		podautoscaler.ConditionsTurned(pa.Status.Conditions, next.Status.Conditions, func(c duck.Condition) (string, string) {
			return c.Type, string(c.Status)
		})
}

func (k *kind) Target(pa *knautoscaling.PodAutoscaler) scale.Target {
	r := pa.Spec.ScaleTargetRef
	return scale.Target{Namespace: pa.Namespace, Name: r.Name, APIVersion: r.APIVersion, Kind: r.Kind}
}

func (k *kind) Decision(pa *knautoscaling.PodAutoscaler) *podautoscaler.Decision {
	return lastDecision(pa)
}
