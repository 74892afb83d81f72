// Package knativeconfig follows Knative Serving's ConfigMaps in its system
// namespace (config-autoscaler, config-deployment, config-network) as
// Knative's own components do: an edit takes effect at once, parsed and
// validated with strategy/kpaconfig (Knative's keys, defaults for absent
// keys, Knative's ranges). An edit that does not parse is refused and the
// last good configuration stays in effect, as knative.dev/pkg's configmap
// store keeps its last value; the refusal is logged, counted, and recorded
// as a Warning Event on the ConfigMap. A ConfigMap that is absent or
// deleted leaves the configuration as it was (the flags' until one is read).
package knativeconfig

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// The ConfigMaps followed, by name.
const (
	NameAutoscaler = "config-autoscaler"
	NameDeployment = "config-deployment"
	NameNetwork    = "config-network"
)

// Names lists the ConfigMaps followed: what RBAC must let a watcher get,
// list and watch in the Knative namespace.
var Names = []string{NameAutoscaler, NameDeployment, NameNetwork}

// EventInvalidConfig is the reason of the Warning Event recorded on a
// ConfigMap whose edit is refused.
const EventInvalidConfig = "InvalidConfig"

// Snapshot is the configuration in effect. It is never changed once
// published: an edit publishes a new one.
type Snapshot struct {
	Autoscaler kpaconfig.Config
	Deployment kpaconfig.DeploymentConfig
	Network    Network
	// AutoscalerData and DeploymentData are the keys the first two were
	// parsed from when they came from the cluster, nil while they are the
	// flags': what the collector forwards to its deciders. Keys starting
	// with '_' (Knative's _example block) are left out.
	AutoscalerData, DeploymentData map[string]string
}

// Options configure a Watcher.
type Options struct {
	// Namespace is Knative's system namespace (knative-serving).
	Namespace string
	// Base is the configuration until each ConfigMap is read: the flags'.
	Base Snapshot
	// Resync is the informers' resync period; 0 means none.
	Resync time.Duration
	// MetricPrefix names the metrics ("tidal_collector" makes
	// tidal_collector_knative_config_refused_total).
	MetricPrefix string
	// Recorder, when set, records a Warning Event on a refused ConfigMap.
	Recorder record.EventRecorder
}

// Watcher follows the ConfigMaps; Current is safe for concurrent use.
type Watcher struct {
	opts    Options
	log     *zap.Logger
	cur     atomic.Pointer[Snapshot]
	infs    []informers.SharedInformerFactory
	synced  []cache.InformerSynced
	refused *prometheus.CounterVec
	stale   *prometheus.GaugeVec

	// mu serializes the informers' handlers and guards what follows.
	mu sync.Mutex
	// refusedRV is the resourceVersion last refused per ConfigMap, so a
	// resync of the same bad object is not reported again.
	refusedRV map[string]string
	subs      []func(*Snapshot)
}

// New returns a watcher of the ConfigMaps through kube, registering its
// metrics with reg. Nothing is read before Run.
func New(opts Options, kube kubernetes.Interface, reg prometheus.Registerer, log *zap.Logger) (*Watcher, error) {
	if opts.Namespace == "" {
		return nil, fmt.Errorf("knative config: a namespace is required")
	}
	w := &Watcher{
		opts: opts,
		log:  log.With(zap.String("namespace", opts.Namespace)),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: opts.MetricPrefix + "_knative_config_refused_total",
			Help: "Versions of Knative's ConfigMaps refused as invalid, by ConfigMap; the last good configuration stayed in effect.",
		}, []string{"configmap"}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: opts.MetricPrefix + "_knative_config_stale",
			Help: "1 while the ConfigMap as stored is refused as invalid and its last good version is in effect, else 0.",
		}, []string{"configmap"}),
		refusedRV: map[string]string{},
	}
	for _, n := range Names {
		w.stale.WithLabelValues(n).Set(0)
		w.refused.WithLabelValues(n)
	}
	for _, c := range []prometheus.Collector{w.refused, w.stale} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("knative config metrics: %w", err)
		}
	}
	base := opts.Base
	w.cur.Store(&base)
	// One informer per name, each listing only its ConfigMap (a field
	// selector on metadata.name), so RBAC can name the three.
	for _, name := range Names {
		inf := informers.NewSharedInformerFactoryWithOptions(kube, opts.Resync, informers.WithNamespace(opts.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
		h := func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == name {
				w.observe(cm)
			}
		}
		hreg, err := inf.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h,
			UpdateFunc: func(_, n any) { h(n) },
			DeleteFunc: func(any) {
				w.log.Warn("knative configmap deleted; its last good configuration stays in effect", zap.String("configmap", name))
			},
		})
		if err != nil {
			return nil, fmt.Errorf("knative config informer %s: %w", name, err)
		}
		w.infs = append(w.infs, inf)
		w.synced = append(w.synced, hreg.HasSynced)
	}
	return w, nil
}

// OnChange registers f, called with each new configuration (from the
// informers' goroutines, one at a time; f must not block). Register before
// Run.
func (w *Watcher) OnChange(f func(*Snapshot)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, f)
}

// Current returns the configuration in effect.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// HasSynced reports whether every ConfigMap present at the start has been
// read (and applied or refused).
func (w *Watcher) HasSynced() bool {
	return !slices.ContainsFunc(w.synced, func(s cache.InformerSynced) bool { return !s() })
}

// Run follows the ConfigMaps until ctx ends. It logs which are absent once
// the first lists are in.
func (w *Watcher) Run(ctx context.Context) error {
	for _, inf := range w.infs {
		inf.Start(ctx.Done())
	}
	defer func() {
		for _, inf := range w.infs {
			inf.Shutdown()
		}
	}()
	if cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		for i, inf := range w.infs {
			if len(inf.Core().V1().ConfigMaps().Informer().GetStore().ListKeys()) == 0 {
				w.log.Warn("knative configmap absent: the flags' configuration is in effect until it is created", zap.String("configmap", Names[i]))
			}
		}
	}
	<-ctx.Done()
	return nil
}

// observe applies one version of a ConfigMap, or refuses it.
func (w *Watcher) observe(cm *corev1.ConfigMap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.cur.Load()
	next := *cur
	var err error
	switch cm.Name {
	case NameAutoscaler:
		if next.Autoscaler, err = kpaconfig.ParseConfig(cm.Data); err == nil {
			next.AutoscalerData, err = forwarded(cm.Data)
		}
	case NameDeployment:
		if next.Deployment, err = kpaconfig.ParseDeploymentConfig(cm.Data); err == nil {
			next.DeploymentData, err = forwarded(cm.Data)
		}
	case NameNetwork:
		next.Network, err = ParseNetwork(cm.Data)
	default:
		return
	}
	log := w.log.With(zap.String("configmap", cm.Name), zap.String("resourceVersion", cm.ResourceVersion))
	if err != nil {
		w.stale.WithLabelValues(cm.Name).Set(1)
		if w.refusedRV[cm.Name] == cm.ResourceVersion {
			return // a resync of the version already reported
		}
		w.refusedRV[cm.Name] = cm.ResourceVersion
		w.refused.WithLabelValues(cm.Name).Inc()
		log.Error("knative configmap refused; the last good configuration stays in effect", zap.Error(err))
		if w.opts.Recorder != nil {
			// A reference by hand: the recorder's scheme need not know
			// ConfigMaps (the actuator's knows tidal's types).
			on := &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name,
				UID: cm.UID, ResourceVersion: cm.ResourceVersion}
			w.opts.Recorder.Eventf(on, corev1.EventTypeWarning, EventInvalidConfig,
				"Refused: %v; the last good configuration stays in effect", err)
		}
		return
	}
	w.stale.WithLabelValues(cm.Name).Set(0)
	delete(w.refusedRV, cm.Name)
	if same(cur, &next) {
		return
	}
	w.cur.Store(&next)
	log.Info("knative configmap applied")
	for _, f := range w.subs {
		f(&next)
	}
}

// same reports whether two snapshots configure alike and forward the same
// keys.
func same(a, b *Snapshot) bool {
	return a.Autoscaler == b.Autoscaler && a.Deployment == b.Deployment && a.Network == b.Network &&
		(a.AutoscalerData == nil) == (b.AutoscalerData == nil) && maps.Equal(a.AutoscalerData, b.AutoscalerData) &&
		(a.DeploymentData == nil) == (b.DeploymentData == nil) && maps.Equal(a.DeploymentData, b.DeploymentData)
}

// forwarded copies a ConfigMap's data without the keys Knative keeps for
// documentation ('_example'), which no parser reads, within the bounds a
// decider takes (those of a target's annotations): what is applied here
// must be what the deciders apply.
func forwarded(data map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(data))
	for k, v := range data {
		if !strings.HasPrefix(k, "_") {
			out[k] = v
		}
	}
	if err := deciderv1.ValidateAnnotations("data", out); err != nil {
		return nil, err
	}
	return out, nil
}
