package targets

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	autoscalinglisters "github.com/tidalscale/tidal/apis/generated/listers/autoscaling/v1alpha1"
	functionslisters "github.com/tidalscale/tidal/apis/generated/listers/functions/v1alpha1"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/keyval"
	"github.com/tidalscale/tidal/knativeconfig"
	"github.com/tidalscale/tidal/kubecache"
	"github.com/tidalscale/tidal/logkey"
	"github.com/tidalscale/tidal/pods"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Sink receives targets and their states (the stream hub).
type Sink interface {
	SetSpec(spec *deciderv1.TargetSpec, retention time.Duration)
	// Remove forgets a deleted target; Drop one this replica stopped owning.
	Remove(ref *commonv1.TargetRef)
	Drop(ref *commonv1.TargetRef)
	SetReadyPods(ref *commonv1.TargetRef, n int32)
	SetError(ref *commonv1.TargetRef, msg string)
}

// Scraper takes request-driven targets.
type Scraper interface {
	Set(t scrape.Target)
	Remove(ref *commonv1.TargetRef)
}

// LagFetcher takes lag targets.
type LagFetcher interface {
	Set(t lag.Target)
	Remove(ref *commonv1.TargetRef)
}

// Config tunes a Discovery.
type Config struct {
	// KafkaBrokers are the bootstrap servers of Functions' topics.
	KafkaBrokers []string
	// AllowedBrokers are the patterns of the other brokers a tenant's lag
	// source may name (BrokerPolicy).
	AllowedBrokers lag.BrokerPatterns
	// Resync replays every object to the handlers this often (a changed
	// Secret is picked up then); 0 means never.
	Resync time.Duration
	// Knative makes Knative Serving's PodAutoscalers targets (UseKnative).
	Knative KnativeConfig
	// Namespaces are the namespaces watched; empty means every one.
	Namespaces kubecache.Namespaces
}

// BrokerPolicy is the collector's one policy for the Kafka brokers lag
// sources may name.
func (c *Config) BrokerPolicy() lag.BrokerPolicy {
	return lag.BrokerPolicy{Listed: c.KafkaBrokers, Patterns: c.AllowedBrokers}
}

// RegisterFlagsWithPrefix registers the discovery flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.Func(p+"kafka-brokers", "Comma-separated Kafka bootstrap servers of Functions' input topics (as the actuator's --kafka-brokers).", func(v string) error {
		c.KafkaBrokers = keyval.List(v)
		return nil
	})
	fs.Var(&c.AllowedBrokers, p+"allowed-brokers", "Comma-separated host:port patterns (Go path.Match, e.g. *.kafka.svc.cluster.local:9092) of the Kafka brokers, besides --kafka-brokers, that lag sources tenants write (a PodAutoscaler's or Metric's spec.lag and its Secret, a KEDA trigger's bootstrapServers) may make the collector connect to, seed and advertised brokers alike; empty means --kafka-brokers alone.")
	fs.DurationVar(&c.Resync, p+"resync", 10*time.Minute, "How often informers replay every object (picks up changed Secrets); 0 means never.")
	fs.Var(&c.Namespaces, p+"namespaces", "Comma-separated namespaces whose PodAutoscalers, Metrics, Functions and pods are watched (Roles in each suffice); empty means every namespace (a ClusterRole).")
	c.Knative.registerFlags(p, fs)
}

// Discovery keeps the collector's targets in step with the cluster.
type Discovery struct {
	cfg     Config
	kube    kubernetes.Interface
	sink    Sink
	scraper Scraper
	fetcher LagFetcher
	log     *zap.Logger

	podInformer cache.SharedIndexInformer
	crd         crdInformers
	metrics     autoscalinglisters.MetricLister
	pas         autoscalinglisters.PodAutoscalerLister
	functions   functionslisters.FunctionLister
	queue       workqueue.TypedRateLimitingInterface[string]
	// informers are the informer goroutines Start starts; Run waits for them.
	informers sync.WaitGroup

	// refused counts targets whose spec setSpec refused; nil until
	// RegisterMetrics.
	refused prometheus.Counter
	// knScrapes is Knative's scrape duration of the Knative targets.
	knScrapes *knScrapes

	// knative is the Knative configuration in effect once the ConfigMaps
	// are read (SetKnativeConfig); nil until then.
	knative atomic.Pointer[knativeconfig.Snapshot]

	// owns reports whether this replica measures a target key; nil means
	// all. Set before Start.
	owns func(key string) bool

	// selectors files the selector of every active source that follows
	// pods, by source key, so a pod event finds the targets it concerns
	// without walking them all. It is written under mu (mu, then its own
	// lock); podChanged reads it before taking mu, never inside.
	selectors *pods.Selectors[string]

	// mu guards active, following, claims and claimed.
	mu     sync.Mutex
	active map[string]*active // by source key: "m/ns/name", "f/ns/name" or "k/ns/name" (Knative)
	// following is the active source that follows the pods of each target
	// key, for ReadyPodNames; its entries are a subset of active's.
	following map[string]*active
	// claims holds, by target key, the rank of every source that names the
	// target; the best (see rank) is the one source that measures it, and
	// only that one has an active entry.
	claims map[string]map[string]rank
	// claimed is the target key each source names, by source key.
	claimed map[string]string
}

// crdInformers are the informers of the custom resources Discovery reads;
// Start runs them, as it runs the pod informer.
type crdInformers struct {
	Metrics, PodAutoscalers, Functions cache.SharedIndexInformer
	// Knative watches Knative's PodAutoscalers; nil unless UseKnative.
	Knative cache.SharedIndexInformer
}

// all returns the informers that exist.
func (c *crdInformers) all() []cache.SharedIndexInformer {
	infs := []cache.SharedIndexInformer{c.Metrics, c.PodAutoscalers, c.Functions}
	if c.Knative != nil {
		infs = append(infs, c.Knative)
	}
	return infs
}

// rank orders the sources that name one target; the lowest measures it.
type rank int

// One source per target. A Function's Deployment is named by the
// Function's own watch and by any PodAutoscaler that scales it. The rule:
//   - a PodAutoscaler the user wrote wins: it is the explicit way to scale a
//     workload, and the actuator's deployer leaves it alone for that reason;
//   - else the Function, read from its spec and its lag.tidal.dev/*
//     annotations with the collector's --kafka-brokers;
//   - the PodAutoscaler the deployer writes for a Function (controlled by
//     it) is never a source: it restates the Function without its
//     annotations, and would flip the spec whenever the two differ.
//
// Sources of one rank (two PodAutoscalers of one workload) are ordered by
// source key. When the measuring source goes, the next takes the target
// over with its history; the target is forgotten only with its last source.
const (
	rankPodAutoscaler rank = iota
	rankFunction
)

// active is what one source object has set up.
type active struct {
	ref  *commonv1.TargetRef
	ns   string
	sel  labels.Selector // nil: no pods followed
	pods *podSource
	// kn labels a Knative PodAutoscaler's series (knmetrics.go); nil for
	// other sources.
	kn *knRevision
}

// New returns a Discovery; nothing is watched before Start.
func New(cfg Config, kube kubernetes.Interface, tidal tidalclient.Interface, sink Sink, scraper Scraper, fetcher LagFetcher, log *zap.Logger) *Discovery {
	podFactory := kubecache.NewKubeInformers(kube, cfg.Resync, cfg.Namespaces)
	podInformer := podFactory.Core().V1().Pods().Informer()
	// Neither fails on an informer that has not started.
	utilruntime.Must(podInformer.SetTransform(pods.Trim))
	utilruntime.Must(pods.AddLabelIndex(podInformer))
	tidalFactory := kubecache.NewTidalInformers(tidal, cfg.Resync, cfg.Namespaces, tidalinformers.WithTransform(kubecache.DropManagedFields))
	metrics := tidalFactory.Autoscaling().V1alpha1().Metrics()
	pas := tidalFactory.Autoscaling().V1alpha1().PodAutoscalers()
	functions := tidalFactory.Functions().V1alpha1().Functions()
	crd := crdInformers{Metrics: metrics.Informer(), PodAutoscalers: pas.Informer(), Functions: functions.Informer()}
	d := &Discovery{
		cfg:         cfg,
		kube:        kube,
		sink:        sink,
		scraper:     scraper,
		fetcher:     fetcher,
		log:         log,
		podInformer: podInformer,
		crd:         crd,
		metrics:     metrics.Lister(),
		pas:         pas.Lister(),
		functions:   functions.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "collector-targets"}),
		selectors: pods.NewSelectors[string](),
		active:    map[string]*active{},
		following: map[string]*active{},
		claims:    map[string]map[string]rank{},
		claimed:   map[string]string{},
		knScrapes: newKnScrapes(),
	}
	_, _ = crd.Metrics.AddEventHandler(d.enqueue("m/"))
	_, _ = crd.PodAutoscalers.AddEventHandler(d.enqueue("m/")) // a PA and its Metric share a name
	_, _ = crd.Functions.AddEventHandler(d.enqueue("f/"))
	_, _ = d.podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.podChanged(nil, obj) },
		UpdateFunc: d.podChanged,
		DeleteFunc: func(obj any) { d.podChanged(nil, obj) },
	})
	return d
}

// enqueue is the event handler that queues an object's key under prefix.
func (d *Discovery) enqueue(prefix string) cache.ResourceEventHandlerFuncs {
	h := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		name, err := cache.ObjectToName(obj)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		d.queue.Add(prefix + name.String())
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, n any) { h(n) }, DeleteFunc: h}
}

// enqueueAll queues the key of every object inf holds under prefix.
func (d *Discovery) enqueueAll(inf cache.SharedIndexInformer, prefix string) {
	for _, k := range inf.GetStore().ListKeys() {
		d.queue.Add(prefix + k)
	}
}

// SetOwnership sets the ownership filter; call Resync after it changes.
func (d *Discovery) SetOwnership(owns func(key string) bool) { d.owns = owns }

// Start starts the informers and returns once their caches are synced and
// the targets found in them are set up, so the collector is primed before it
// reports ready. The informers run until ctx ends; call Run next, which
// returns only once they have stopped. If Start fails, they have stopped
// when it returns.
func (d *Discovery) Start(ctx context.Context) error {
	var synced []cache.InformerSynced
	for _, inf := range append(d.crd.all(), d.podInformer) {
		d.informers.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		d.informers.Wait()
		return errors.New("target informers: caches did not sync")
	}
	// Reconcile what is there now before reporting ready.
	for d.queue.Len() > 0 {
		if !d.processNext(ctx) {
			break
		}
	}
	return nil
}

// Run reconciles until ctx ends, and returns once the informers Start
// started have stopped too.
func (d *Discovery) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		d.queue.ShutDown()
	})
	for d.processNext(ctx) {
	}
	wg.Wait()
	d.informers.Wait()
	return nil
}

// Resync re-evaluates every target (after the ownership changed).
func (d *Discovery) Resync() {
	d.enqueueAll(d.crd.Metrics, "m/")
	d.enqueueAll(d.crd.Functions, "f/")
	if d.crd.Knative != nil {
		d.enqueueAll(d.crd.Knative, "k/")
	}
	d.mu.Lock()
	for k := range d.active {
		d.queue.Add(k)
	}
	d.mu.Unlock()
}

// ReadyPodNames lists a target's ready pods, for GetWindow.
func (d *Discovery) ReadyPodNames(ref *commonv1.TargetRef) []string {
	d.mu.Lock()
	var src *podSource
	if a := d.following[ref.Key()]; a != nil {
		src = a.pods
	}
	d.mu.Unlock()
	if src == nil {
		return nil
	}
	return src.names()
}

func (d *Discovery) processNext(ctx context.Context) bool {
	key, quit := d.queue.Get()
	if quit {
		return false
	}
	defer d.queue.Done(key)
	if err := d.sync(ctx, key); err != nil {
		d.log.Warn("target sync failed; retrying", zap.String("object", key), zap.Error(err))
		d.queue.AddRateLimited(key)
		return true
	}
	d.queue.Forget(key)
	return true
}

// podChanged marks stale the pods of the targets whose selectors match pod
// obj and enqueues those targets, whose ready counts may have changed. Only
// the selectors anchored on one of the pod's labels are tried
// (pods.Selectors), not every target of the namespace. old is the pod
// before an update, nil for an add or a delete: when its labels differ, the
// targets it matched lose the pod; when its ResourceVersion is the same,
// the update is a resync and is dropped.
func (d *Discovery) podChanged(old, obj any) {
	p, o := pods.Of(obj), pods.Of(old)
	if p == nil || o != nil && o.ResourceVersion == p.ResourceVersion {
		return // not a pod, or a resync: nothing changed
	}
	var keys []string
	add := func(k string) { keys = append(keys, k) }
	d.selectors.Matching(p.Namespace, p.Labels, add)
	if o != nil && !labels.Equals(o.Labels, p.Labels) {
		d.selectors.Matching(o.Namespace, o.Labels, add)
	}
	if len(keys) == 0 {
		return
	}
	d.mu.Lock()
	for _, k := range keys {
		if a := d.active[k]; a != nil && a.pods != nil {
			a.pods.changed()
		}
	}
	d.mu.Unlock()
	for _, k := range keys {
		d.queue.Add(k) // the queue drops a key already queued
	}
}

func (d *Discovery) sync(ctx context.Context, key string) error {
	kind, nsName, _ := strings.Cut(key, "/")
	ns, name, _ := strings.Cut(nsName, "/")
	switch kind {
	case "m":
		return d.syncMetric(ctx, key, ns, name)
	case "f":
		return d.syncFunction(key, ns, name)
	case "k":
		if d.crd.Knative == nil {
			return nil // only the Knative informer queues these
		}
		return d.syncKnative(key, ns, name)
	}
	return nil
}

func (d *Discovery) syncMetric(ctx context.Context, key, ns, name string) error {
	m, err := d.metrics.Metrics(ns).Get(name)
	if apierrors.IsNotFound(err) {
		d.release(key)
		return nil
	}
	if err != nil {
		return err
	}
	pa, err := d.pas.PodAutoscalers(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// The actuator writes the Metric for its PodAutoscaler: without one
		// there is no scale target to name.
		d.release(key)
		return nil
	}
	if err != nil {
		return err
	}
	if functionControlled(pa) {
		d.release(key) // the Function is the source (see rank)
		return nil
	}
	ref := targetRef(pa)
	if !d.claim(key, ref, rankPodAutoscaler) {
		return nil
	}
	if m.Spec.Lag != nil {
		spec, interval, perr := lagSpec(ref, lagMode(string(m.Spec.Lag.Mode)), lagParams(m.Spec.Lag), pa.Annotations)
		if !d.setSpec(key, spec, 0) {
			return nil
		}
		d.scraper.Remove(ref)
		d.setSelector(key, ns, nil, 0)
		if perr != nil {
			return d.lagRefused(ref, perr)
		}
		cluster, err := d.lagCluster(ctx, ns, m.Spec.Lag)
		if err != nil {
			return d.lagRefused(ref, err)
		}
		d.fetcher.Set(lag.Target{Ref: ref, Cluster: cluster, Topic: m.Spec.Lag.Topic, Group: m.Spec.Lag.ConsumerGroup, Interval: interval})
		return nil
	}
	d.fetcher.Remove(ref)
	if !d.setSpec(key, kpaSpec(pa), retention(m)) {
		return nil
	}
	if m.Spec.Selector == nil {
		d.scraper.Remove(ref)
		d.setSelector(key, ns, nil, 0)
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(m.Spec.Selector)
	if err != nil {
		return d.scrapeRefused(ref, fmt.Errorf("metric %s/%s selector: %w", ns, name, err))
	}
	port := int32(9090)
	if m.Spec.ScrapePort != nil {
		port = *m.Spec.ScrapePort
	}
	src := d.setSelector(key, ns, sel, port)
	d.sink.SetReadyPods(ref, int32(len(src.ReadyPods(nil))))
	if m.Spec.ScrapeTarget == "" {
		// Knative's TBC=-1 case: nothing is scraped, pushed stats count.
		d.scraper.Remove(ref)
		return nil
	}
	f, err := format(m, pa.Spec.Metric)
	if err != nil {
		return d.scrapeRefused(ref, err)
	}
	path := m.Spec.ScrapePath
	if path == "" {
		path = "/metrics"
	}
	d.scraper.Set(scrape.Target{Ref: ref, Path: path, Format: f, StableWindow: m.Spec.StableWindow.Duration, Pods: src})
	return nil
}

func (d *Discovery) syncFunction(key, ns, name string) error {
	fn, err := d.functions.Functions(ns).Get(name)
	if apierrors.IsNotFound(err) {
		d.release(key)
		return nil
	}
	if err != nil {
		return err
	}
	ref := functionRef(fn)
	if !d.claim(key, ref, rankFunction) {
		return nil
	}
	spec, interval, perr := lagSpec(ref, lagMode(string(fn.Spec.LagMode)), functionParams(fn), fn.Annotations)
	if !d.setSpec(key, spec, 0) {
		return nil
	}
	if perr != nil {
		return d.lagRefused(ref, perr)
	}
	if len(d.cfg.KafkaBrokers) == 0 {
		return d.lagRefused(ref, errors.New("no Kafka brokers for Functions: set --kafka-brokers"))
	}
	// riff's consumer group is the function's name (riff's function controller).
	d.fetcher.Set(lag.Target{Ref: ref, Cluster: lag.Cluster{Brokers: d.cfg.KafkaBrokers}, Topic: fn.Spec.Input, Group: fn.Name, Interval: interval})
	return nil
}

// scrapeRefused puts a target whose scrape settings are unusable in an
// error state and stops scraping it; retrying cannot help until the object
// changes, so the sync succeeds.
func (d *Discovery) scrapeRefused(ref *commonv1.TargetRef, err error) error {
	d.scraper.Remove(ref)
	d.sink.SetError(ref, configError(err))
	d.log.Warn("scrape target refused", logkey.Target(ref.Key()), zap.Error(err))
	return nil
}

// lagRefused puts a lag target whose settings are unusable in an error
// state; retrying cannot help until the object changes.
func (d *Discovery) lagRefused(ref *commonv1.TargetRef, err error) error {
	d.fetcher.Remove(ref)
	d.sink.SetError(ref, configError(err))
	d.log.Warn("lag target refused", logkey.Target(ref.Key()), zap.Error(err))
	return nil
}

// lagCluster resolves a lag source's brokers and credentials, reading its
// Secret when it names one (KEDA's keys: tls, ca, cert, key, sasl,
// username, password beside the brokers key), and checks them against the
// broker policy: a tenant wrote them.
func (d *Discovery) lagCluster(ctx context.Context, ns string, src *autoscalingv1alpha1.LagSource) (lag.Cluster, error) {
	c, err := d.lagBrokers(ctx, ns, src)
	if err != nil {
		return c, err
	}
	c, err = d.cfg.BrokerPolicy().Cluster(c)
	if err != nil {
		return c, fmt.Errorf("spec.lag: %w", err)
	}
	return c, nil
}

// lagBrokers is lagCluster before the policy.
func (d *Discovery) lagBrokers(ctx context.Context, ns string, src *autoscalingv1alpha1.LagSource) (lag.Cluster, error) {
	c := lag.Cluster{Brokers: src.Brokers}
	ref := src.BrokersSecretRef
	if ref == nil {
		return c, nil
	}
	sec, err := d.kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return c, fmt.Errorf("secret %s/%s: %w", ns, ref.Name, err)
	}
	raw, ok := sec.Data[ref.Key]
	if !ok {
		return c, fmt.Errorf("secret %s/%s: no key %q", ns, ref.Name, ref.Key)
	}
	if c.Brokers = keyval.List(string(raw)); len(c.Brokers) == 0 {
		return c, fmt.Errorf("secret %s/%s key %q: no brokers", ns, ref.Name, ref.Key)
	}
	c.Auth, err = lag.AuthFromSecret(sec.Data)
	if err != nil {
		return c, fmt.Errorf("secret %s/%s: %w", ns, ref.Name, err)
	}
	return c, nil
}

// claim records that source key names ref with rank r and reports whether
// it is the source that measures ref on this replica: the best-ranked of
// the sources naming ref, and ref owned here. A source that named another
// target before lets go of it first. The winner takes over from the source
// that measured ref until now; a loser stands down.
func (d *Discovery) claim(key string, ref *commonv1.TargetRef, r rank) bool {
	target := ref.Key()
	d.mu.Lock()
	prev, had := d.claimed[key]
	d.mu.Unlock()
	if had && prev != target {
		d.release(key) // the scale target changed
	}
	d.mu.Lock()
	c := d.claims[target]
	if c == nil {
		c = map[string]rank{}
		d.claims[target] = c
	}
	c[key] = r
	d.claimed[key] = target
	winner := bestLocked(c)
	var displaced []string
	if winner == key {
		// Every active source has a claim on its own target (a source
		// whose target changes is released first), so the sources to
		// displace are among this target's claims, not every active one.
		for k := range c {
			if _, on := d.active[k]; on && k != key {
				displaced = append(displaced, k)
			}
		}
	}
	_, ok := d.active[key]
	d.mu.Unlock()
	if winner != key {
		d.standDown(key)
		d.log.Info("target measured through another source", logkey.Target(target), zap.String("object", key), zap.String("source", winner))
		return false
	}
	for _, k := range displaced {
		d.standDown(k)
	}
	if d.owns != nil && !d.owns(target) {
		if ok {
			d.remove(key, false)
		}
		return false
	}
	if !ok {
		d.mu.Lock()
		d.active[key] = &active{ref: ref, ns: ref.GetNamespace()}
		d.mu.Unlock()
	}
	return true
}

// bestLocked is the source of claims c that measures the target: the
// lowest rank, then the lowest source key.
func bestLocked(c map[string]rank) string {
	var best string
	for k, r := range c {
		if best == "" || r < c[best] || r == c[best] && k < best {
			best = k
		}
	}
	return best
}

// release forgets source key's claim (the object is gone, or no longer
// names a target). The next source naming its target, if any, is queued to
// take the target over, which stays; else the target is removed.
func (d *Discovery) release(key string) {
	d.mu.Lock()
	target, had := d.claimed[key]
	var next string
	if had {
		delete(d.claimed, key)
		c := d.claims[target]
		delete(c, key)
		if len(c) == 0 {
			delete(d.claims, target)
		}
		next = bestLocked(c)
	}
	d.mu.Unlock()
	if next == "" {
		d.remove(key, true)
		return
	}
	d.standDown(key)
	d.queue.Add(next)
}

// functionControlled reports whether a Function controls pa: the deployer
// wrote it for the Function.
func functionControlled(pa *autoscalingv1alpha1.PodAutoscaler) bool {
	c := metav1.GetControllerOf(pa)
	return c != nil && c.Kind == "Function" && c.APIVersion == functionsv1alpha1.SchemeGroupVersion.String()
}

// setSelector has source key follow the pods sel matches, scraped at port,
// and returns their source; a nil sel stops following pods.
func (d *Discovery) setSelector(key, ns string, sel labels.Selector, port int32) *podSource {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.active[key]
	if sel == nil {
		d.followLocked(key, a, nil, nil)
		return nil
	}
	if a.pods == nil || a.sel.String() != sel.String() || a.pods.port != strconv.Itoa(int(port)) {
		d.followLocked(key, a, sel, newPodSource(d.podInformer.GetIndexer(), ns, sel, port))
	}
	return a.pods
}

// followLocked sets the selector and pod source of a, the active entry of
// source key, and files them where pod events and ReadyPodNames find them;
// a nil src stops following pods. The selector is filed before the new
// source first lists its pods, so no event between the two is missed.
func (d *Discovery) followLocked(key string, a *active, sel labels.Selector, src *podSource) {
	a.sel, a.pods = sel, src
	target := a.ref.Key()
	if src == nil {
		d.selectors.Delete(key)
		if d.following[target] == a {
			delete(d.following, target)
		}
		return
	}
	d.selectors.Set(key, a.ns, sel)
	d.following[target] = a
}

// standDown tears down what source key set up for its target, if anything,
// and leaves the target itself to the source that now measures it; an
// error state this source set is cleared, so it does not outlive it.
func (d *Discovery) standDown(key string) {
	if a := d.detach(key); a != nil {
		d.sink.SetError(a.ref, "")
	}
}

// remove tears down what key set up; tell says whether the target is gone
// (the decider forgets it) or only no longer ours.
func (d *Discovery) remove(key string, tell bool) {
	a := d.detach(key)
	switch {
	case a == nil:
	case tell:
		d.sink.Remove(a.ref)
	default:
		d.sink.Drop(a.ref)
	}
}

// detach forgets source key's active entry and stops its scrapes and lag
// fetches; it returns the entry, or nil if key had none.
func (d *Discovery) detach(key string) *active {
	d.mu.Lock()
	a, ok := d.active[key]
	if ok {
		d.followLocked(key, a, nil, nil)
		delete(d.active, key)
	}
	d.mu.Unlock()
	if !ok {
		return nil
	}
	d.scraper.Remove(a.ref)
	d.knScrapes.drop(key)
	d.fetcher.Remove(a.ref)
	return a
}
