// Command tidal-actuator applies deciders' decisions: it is the only tidal
// service that writes to Kubernetes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/actuator/deployer"
	"github.com/tidalscale/tidal/actuator/knative"
	"github.com/tidalscale/tidal/actuator/peer"
	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/keyval"
	"github.com/tidalscale/tidal/knativeconfig"
	"github.com/tidalscale/tidal/kubecache"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/kube"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/shard/bucket"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// Scaler kinds.
const (
	scalerMemory     = "memory"
	scalerKubernetes = "kubernetes"
)

type config struct {
	server server.Config
	// scaler selects where replicas are written.
	scaler string
	kube   kubeConfig
	// kinds are the target kinds Scale and GetScale may reach.
	kinds scale.Kinds
}

// kubeConfig configures the Kubernetes mode.
type kubeConfig struct {
	// client is how the actuator reaches the API server.
	client  kube.Config
	workers int
	resync  time.Duration
	// autoscalerDir and deploymentDir hold Knative's config-autoscaler and
	// config-deployment keys, one file per key, as the deciders read them.
	autoscalerDir string
	deploymentDir string
	targetRetry   time.Duration
	// statusInterval coalesces the PodAutoscalers' status writes.
	statusInterval time.Duration
	brokers        string
	sidecarImage   string
	// bucket shares the PodAutoscalers among actuator replicas.
	bucket bucket.Config
	// knative reconciles Knative Serving's PodAutoscalers of knativeClasses.
	knative          bool
	knativeClasses   string
	knativeNamespace string
	clusterDomain    string
	// namespaces are the namespaces watched and acted in; empty means
	// every one.
	namespaces kubecache.Namespaces
	// liveReadRate bounds GetScale's live reads of kinds the actuator does
	// not cache; liveReadNamespaceRate each caller's about one namespace.
	liveReadRate           float64
	liveReadBurst          int
	liveReadNamespaceRate  float64
	liveReadNamespaceBurst int
}

func (c *config) RegisterFlags(fs *flag.FlagSet) {
	c.server.RegisterFlags(fs, "127.0.0.1:9003", "127.0.0.1:9013")
	c.kinds.RegisterFlags(fs)
	fs.StringVar(&c.scaler, "scaler", scalerMemory, "Where replicas are written: memory (no cluster; counts live in this process) or kubernetes.")
	k := &c.kube
	// Sized for 10,000 targets: a status write, a scale patch and an Event
	// per change, a fifth of the targets changing every 30 s.
	k.client.RegisterFlags(fs, 400, 800)
	fs.IntVar(&k.workers, "workers", 32, "Reconcile workers per controller (PodAutoscaler, Function); each pass that writes waits for the API server, so they bound the status writes a second.")
	fs.DurationVar(&k.resync, "resync", 10*time.Hour, "Informer resync period; 0 means none.")
	fs.StringVar(&k.autoscalerDir, "config-autoscaler", "", "Directory holding Knative's config-autoscaler keys, one file per key (a mounted ConfigMap, the deciders' too); empty means Knative's defaults.")
	fs.StringVar(&k.deploymentDir, "config-deployment", "", "Directory holding Knative's config-deployment keys (progress-deadline: activation times out 30s after it); empty means the defaults.")
	fs.DurationVar(&k.targetRetry, "target-retry", 10*time.Second, "How long to wait before looking again for a PodAutoscaler's missing scale target.")
	fs.DurationVar(&k.statusInterval, "status-interval", 3*time.Second, "How long a PodAutoscaler's changes must pause (and its ready pods be at the desired scale) before this actuator writes its status, with --buckets: one status write reports everything applied meanwhile, at most three intervals after the first change (scale writes are not delayed) and a Scaled Event reports a change of direction, not every step. A replica that takes a PodAutoscaler over from one that stopped without writing what it applied leaves the target as it is until a decider's decision reaches it (deciders send each target's last decision again within --scale-refresh until a status records it, so one applied and not recorded comes; keep that under 45s) or 45s have passed. 0 writes status with every scale write (after it, while this replica holds the PodAutoscaler under --buckets; before it otherwise), with an Event for each change.")
	fs.StringVar(&k.brokers, "kafka-brokers", "", "Kafka bootstrap servers (host:port, comma-separated) that deployed functions use.")
	fs.StringVar(&k.sidecarImage, "function-sidecar-image", "projectriff/function-sidecar:0.0.7", "Image of the sidecar container of deployed functions.")
	k.bucket.RegisterFlagsWithPrefix("", fs, "actuator")
	fs.BoolVar(&k.knative, "knative", false, "Reconcile Knative Serving's PodAutoscalers of --knative-classes in place of Knative's autoscaler (needs --scaler kubernetes).")
	fs.StringVar(&k.knativeClasses, "knative-classes", knautoscaling.ClassKPA, "Comma-separated PodAutoscaler classes (autoscaling.knative.dev/class) reconciled with --knative; "+knautoscaling.ClassTidal+" selects tidal beside Knative's autoscaler.")
	fs.StringVar(&k.knativeNamespace, "knative-namespace", "knative-serving", "Knative Serving's namespace, whose config-autoscaler and config-deployment the actuator follows with --knative (edits apply at once; --config-autoscaler and --config-deployment stand until each is read).")
	fs.StringVar(&k.clusterDomain, "cluster-domain", "cluster.local", "Cluster DNS domain of the Services the activator probe dials (--knative).")
	fs.Var(&k.namespaces, "namespaces", "Comma-separated namespaces this actuator watches and acts in (Roles in each suffice); Scale, GetScale, Deploy, Update and Undeploy of anything elsewhere are refused. Empty means every namespace (a ClusterRole).")
	fs.Float64Var(&k.liveReadRate, "live-read-rate", 5, "GetScale reads the scale of a kind the actuator does not cache (ReplicaSets, custom resources) from the API server: at most this many a second across all callers, more get RESOURCE_EXHAUSTED. Deployments and StatefulSets are always answered from the cache.")
	fs.IntVar(&k.liveReadBurst, "live-read-burst", 10, "Live GetScale reads at once above --live-read-rate.")
	fs.Float64Var(&k.liveReadNamespaceRate, "live-read-namespace-rate", 1, "Live GetScale reads (see --live-read-rate) per second each caller may make about one namespace, spent before --live-read-rate, so a caller over its share leaves the other callers and namespaces theirs; more get RESOURCE_EXHAUSTED. 0 means no share, only --live-read-rate.")
	fs.IntVar(&k.liveReadNamespaceBurst, "live-read-namespace-burst", 3, "Live GetScale reads a caller may make about one namespace at once above --live-read-namespace-rate; keep it below --live-read-burst, or one caller can take the whole burst.")
}

func (c *config) Validate() error {
	if err := c.server.Validate(); err != nil {
		return err
	}
	if c.kube.knative && c.scaler != scalerKubernetes {
		return fmt.Errorf("--knative: needs --scaler kubernetes, have %q", c.scaler)
	}
	switch c.scaler {
	case scalerMemory:
		return nil
	case scalerKubernetes:
	default:
		return fmt.Errorf("--scaler %q: want memory or kubernetes", c.scaler)
	}
	k := &c.kube
	if err := k.client.Validate(); err != nil {
		return err
	}
	if k.workers < 1 || k.workers > 64 {
		return fmt.Errorf("--workers %d: want 1 to 64", k.workers)
	}
	if k.resync < 0 {
		return fmt.Errorf("--resync %s: want at least 0", k.resync)
	}
	if k.targetRetry <= 0 {
		return fmt.Errorf("--target-retry %s: want > 0", k.targetRetry)
	}
	if k.statusInterval < 0 || k.statusInterval > time.Minute {
		return fmt.Errorf("--status-interval %s: want 0 to 1m", k.statusInterval)
	}
	if !(k.liveReadRate > 0) || math.IsInf(k.liveReadRate, 0) || k.liveReadBurst < 1 {
		return fmt.Errorf("--live-read-rate %g, --live-read-burst %d: want a finite rate above 0 and a burst of at least 1", k.liveReadRate, k.liveReadBurst)
	}
	if !(k.liveReadNamespaceRate >= 0) || math.IsInf(k.liveReadNamespaceRate, 0) || (k.liveReadNamespaceRate > 0 && k.liveReadNamespaceBurst < 1) {
		return fmt.Errorf("--live-read-namespace-rate %g, --live-read-namespace-burst %d: want a finite rate of at least 0 (0: no share) and a burst of at least 1", k.liveReadNamespaceRate, k.liveReadNamespaceBurst)
	}
	if _, err := c.autoscalerConfig(); err != nil {
		return err
	}
	if _, err := c.deploymentConfig(); err != nil {
		return err
	}
	for _, b := range keyval.List(k.brokers) {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return fmt.Errorf("--kafka-brokers %q: %q is not host:port", k.brokers, b)
		}
	}
	if k.sidecarImage == "" {
		return errors.New("--function-sidecar-image: want an image reference")
	}
	if k.knative {
		if _, err := c.knativeClasses(); err != nil {
			return err
		}
		if k.clusterDomain == "" || strings.ContainsAny(k.clusterDomain, "/: ") {
			return fmt.Errorf("--cluster-domain %q: want a DNS domain such as cluster.local", k.clusterDomain)
		}
	}
	k.bucket.Identity = c.server.Advertise()
	return k.bucket.Validate("")
}

// maxKnativeClasses bounds --knative-classes.
const maxKnativeClasses = 8

// knativeClasses parses --knative-classes. Knative's HPA class is refused:
// Knative's own HPA reconciler scales those.
func (c *config) knativeClasses() ([]string, error) {
	var classes []string
	for cl := range strings.SplitSeq(c.kube.knativeClasses, ",") {
		cl = strings.TrimSpace(cl)
		switch {
		case cl == "":
			continue
		case cl == knautoscaling.ClassHPA:
			return nil, fmt.Errorf("--knative-classes %q: %s is Knative's HPA class, which tidal does not reconcile", commonv1.Prefix(c.kube.knativeClasses), cl)
		case len(cl) > 253 || strings.ContainsAny(cl, " /,"):
			return nil, fmt.Errorf("--knative-classes %q: %q is not a class name", commonv1.Prefix(c.kube.knativeClasses), commonv1.Prefix(cl))
		}
		classes = append(classes, cl)
	}
	if len(classes) == 0 || len(classes) > maxKnativeClasses {
		return nil, fmt.Errorf("--knative-classes %q: want 1 to %d classes", commonv1.Prefix(c.kube.knativeClasses), maxKnativeClasses)
	}
	return classes, nil
}

func (c *config) autoscalerConfig() (kpaconfig.Config, error) {
	return server.ParseConfigDir("config-autoscaler", c.kube.autoscalerDir, kpaconfig.ParseConfig)
}

func (c *config) deploymentConfig() (kpaconfig.DeploymentConfig, error) {
	return server.ParseConfigDir("config-deployment", c.kube.deploymentDir, kpaconfig.ParseDeploymentConfig)
}

func main() { server.Main("tidal-actuator", run) }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == certificatesCommand {
		return runCertificates(ctx, args[1:], stderr)
	}
	var cfg config
	if err := server.Parse("tidal-actuator", &cfg, args, stderr); err != nil {
		return err
	}
	log, err := server.NewLogger("actuator", cfg.server.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("scaler", zap.String("kind", cfg.scaler))

	reg := prometheus.NewRegistry()
	srv := server.New(cfg.server, log, reg)
	if cfg.scaler == scalerMemory {
		h := newHandler(memoryEngine{scale.New(scale.NewMemory(), time.Now)}, nil, log)
		h.useKinds(&cfg.kinds, reg)
		actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), h)
		srv.SetReady(true) // Run listens, then serves
		return srv.Run(ctx)
	}
	return runKube(ctx, &cfg, srv, reg, log)
}

func runKube(ctx context.Context, cfg *config, srv *server.Server, reg prometheus.Registerer, log *zap.Logger) error {
	rc, err := cfg.kube.client.RestConfig("tidal-actuator")
	if err != nil {
		return err
	}
	// The one client-side budget of every client below, spent by priority:
	// wakes from zero, then scale-ups, then scale-downs and status.
	budget := writebudget.NewLimiter(cfg.kube.client.QPS, cfg.kube.client.Burst, budgetWaiting, clock.RealClock{}, reg)
	defer budget.Stop()
	rc.RateLimiter = budget
	claims := budget.Claims(budgetTargets)
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	tidal, err := tidalclient.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("tidal client: %w", err)
	}
	live, err := scale.NewKube(rc)
	if err != nil {
		return err
	}
	ascfg, err := cfg.autoscalerConfig()
	if err != nil {
		return err
	}
	depcfg, err := cfg.deploymentConfig()
	if err != nil {
		return err
	}
	// Every cached object without its managed fields (pods and
	// Deployments are trimmed further).
	tidalInf := kubecache.NewTidalInformers(tidal, cfg.kube.resync, cfg.kube.namespaces, tidalinformers.WithTransform(kubecache.DropManagedFields))
	kubeInf := kubecache.NewKubeInformers(kube, cfg.kube.resync, cfg.kube.namespaces, informers.WithTransform(kubecache.DropManagedFields))
	// Deployments keep their scale, owners and the deployer's spec hash:
	// their pod templates are most of them and nothing here reads one.
	if err := kubeInf.Apps().V1().Deployments().Informer().SetTransform(kubecache.TrimDeployment(deployer.AnnotationSpecHash)); err != nil {
		return fmt.Errorf("deployment informer: %w", err)
	}
	scaler, err := scale.NewCached(live, kubeInf.Apps().V1().Deployments())
	if err != nil {
		return err
	}
	// GetScale, which any identity may call, reads StatefulSets from a
	// cache of their scales, only where they may be scaled at all.
	var stsSynced []cache.InformerSynced // empty when not cached
	if _, ok := cfg.kinds.Allows("apps/v1", "StatefulSet"); ok {
		sts := kubeInf.Apps().V1().StatefulSets()
		if err := scaler.CacheStatefulSets(sts); err != nil {
			return err
		}
		stsSynced = []cache.InformerSynced{sts.Informer().HasSynced}
	}
	recorder, broadcaster := podautoscaler.NewEventRecorder(kube)
	defer broadcaster.Shutdown()

	// With --knative, Knative's ConfigMaps followed live; else the flags'.
	var knCfg *knativeconfig.Watcher
	var liveCfg func() (kpaconfig.Config, kpaconfig.DeploymentConfig)
	if cfg.kube.knative {
		knCfg, err = knativeconfig.New(knativeconfig.Options{
			Namespace:    cfg.kube.knativeNamespace,
			Base:         knativeconfig.Snapshot{Autoscaler: ascfg, Deployment: depcfg, Network: knativeconfig.DefaultNetwork()},
			Resync:       cfg.kube.resync,
			MetricPrefix: "tidal_actuator",
			Recorder:     recorder,
		}, kube, reg, log)
		if err != nil {
			return err
		}
		liveCfg = func() (kpaconfig.Config, kpaconfig.DeploymentConfig) {
			s := knCfg.Current()
			return s.Autoscaler, s.Deployment
		}
	}
	paCfg := podautoscaler.Config{
		Autoscaler:     ascfg,
		Deployment:     depcfg,
		Live:           liveCfg,
		Workers:        cfg.kube.workers,
		TargetRetry:    cfg.kube.targetRetry,
		StatusInterval: cfg.kube.statusInterval,
		Status:         podautoscaler.NewStatusMetrics(reg),
		Claims:         claims,
	}
	pas, err := podautoscaler.New(paCfg, log, tidal, tidalInf, kubeInf, scaler, recorder)
	if err != nil {
		return err
	}
	dep := deployer.New(deployer.Config{SidecarImage: cfg.kube.sidecarImage, Brokers: keyval.List(cfg.kube.brokers)}, kube, scaler)
	fns, err := deployer.NewController(dep, log, tidal, tidalInf, kubeInf, recorder, cfg.kube.workers)
	if err != nil {
		return err
	}
	eng := &kubeEngine{pas: pas, functions: fns}
	if cfg.kube.knative {
		if eng.knative, err = newKnative(cfg, rc, paCfg, kubeInf, scaler, recorder, log); err != nil {
			return err
		}
		// An edit reaches every PodAutoscaler's next reconcile.
		knCfg.OnChange(func(*knativeconfig.Snapshot) {
			pas.Resync()
			eng.knative.Resync()
		})
	}
	h := newHandler(eng, &functionService{deployer: dep}, log)
	h.useKinds(&cfg.kinds, reg)
	if h.access, err = newAccess(cfg, tidalInf, kubeInf, eng); err != nil {
		return err
	}
	h.access.caches = scaler.Caches
	h.access.synced = append(h.access.synced, stsSynced...)
	var buckets *bucket.Set
	if cfg.kube.bucket.Buckets > 0 {
		buckets = bucket.New(cfg.kube.bucket, kube, func() {
			// What this replica applied and has not written goes to status
			// before another replica reads it to take over (the Lease is
			// released just before; the taker needs a retry period to see
			// it), and before the stop of a clean shutdown.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			defer cancel()
			if err := pas.FlushPending(fctx); err != nil {
				log.Warn("status not written before a change of ownership", zap.Error(err))
			}
			if eng.knative != nil {
				if err := eng.knative.FlushPending(fctx); err != nil {
					log.Warn("knative status not written before a change of ownership", zap.Error(err))
				}
			}
			pas.Resync()
			fns.Resync()
			if eng.knative != nil {
				eng.knative.Resync()
			}
		}, reg, log)
		pas.SetOwnership(buckets.Owner)
		fns.SetOwnership(buckets.Owner)
		if eng.knative != nil {
			eng.knative.SetOwnership(buckets.Owner)
		}
		dial, err := cfg.server.DialOption(server.RoleActuator)
		if err != nil {
			return err
		}
		h.forward = peer.New(dial)
		defer h.forward.Close()
	}
	actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), h)
	if _, _, err := srv.Listen(); err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	// The controllers asked both factories for their informers above; Start
	// runs those, and Shutdown waits for them.
	tidalInf.StartWithContext(gctx)
	defer tidalInf.Shutdown()
	kubeInf.Start(gctx.Done())
	defer kubeInf.Shutdown()
	if buckets != nil {
		g.Go(func() error { return buckets.Run(gctx) })
	}
	g.Go(func() error { return pas.Run(gctx) })
	g.Go(func() error { return fns.Run(gctx) })
	synced := append([]cache.InformerSynced{pas.HasSynced, fns.HasSynced}, stsSynced...)
	if eng.knative != nil { // and knCfg
		g.Go(func() error { return knCfg.Run(gctx) })
		g.Go(func() error { return eng.knative.Run(gctx) })
		synced = append(synced, knCfg.HasSynced, eng.knative.HasSynced)
	}
	g.Go(func() error {
		// Prime before ready: every cache synced.
		if !cache.WaitForCacheSync(gctx.Done(), synced...) {
			return nil
		}
		log.Info("caches synced")
		srv.SetReady(true)
		return nil
	})
	g.Go(func() error { return srv.Run(gctx) })
	return g.Wait()
}

// budgetWaiting bounds the API requests waiting for the client-side budget
// at once, and budgetTargets the PodAutoscalers with a pass under way (each
// holds one claim): as many as a decider holds targets (--max-targets).
const (
	budgetWaiting = 50_000
	budgetTargets = 50_000
)

// flushTimeout bounds the status writes made at a change of ownership.
const flushTimeout = 5 * time.Second

// maxLiveReadShares bounds the live-read shares held: callers times the
// namespaces they read, the least recently used forgotten first.
const maxLiveReadShares = 16384

// newAccess is what the handler may act on, from the informers the
// controllers share.
func newAccess(cfg *config, tidalInf tidalinformers.SharedInformerFactory, kubeInf informers.SharedInformerFactory, eng *kubeEngine) (*access, error) {
	pas := tidalInf.Autoscaling().V1alpha1().PodAutoscalers().Informer()
	if err := pas.AddIndexers(cache.Indexers{indexManaged: managedTargetIndex}); err != nil {
		return nil, fmt.Errorf("podautoscaler managed-target index: %w", err)
	}
	fns := tidalInf.Functions().V1alpha1().Functions()
	deps := kubeInf.Apps().V1().Deployments()
	a := &access{
		namespaces:  cfg.kube.namespaces,
		pas:         pas.GetIndexer(),
		functions:   fns.Lister(),
		deployments: deps.Lister(),
		synced:      []cache.InformerSynced{pas.HasSynced, fns.Informer().HasSynced, deps.Informer().HasSynced},
		liveReads:   rate.NewLimiter(rate.Limit(cfg.kube.liveReadRate), cfg.kube.liveReadBurst),
	}
	if cfg.kube.liveReadNamespaceRate > 0 {
		a.liveShares = server.NewKeyedLimiter(cfg.kube.liveReadNamespaceRate, cfg.kube.liveReadNamespaceBurst, maxLiveReadShares)
	}
	if eng.knative != nil {
		a.knative = eng.knative
	}
	return a, nil
}

// newKnative returns the reconciler of Knative's PodAutoscalers (--knative).
func newKnative(cfg *config, rc *rest.Config, paCfg podautoscaler.Config, kubeInf informers.SharedInformerFactory,
	scaler *scale.Cached, recorder record.EventRecorder, log *zap.Logger,
) (*knative.Controller, error) {
	kn, err := knclient.New(rc)
	if err != nil {
		return nil, err
	}
	classes, err := cfg.knativeClasses()
	if err != nil {
		return nil, err
	}
	log.Info("knative mode", zap.Strings("classes", classes))
	return knative.New(knative.Config{
		Config:        paCfg,
		Classes:       classes,
		Namespaces:    cfg.kube.namespaces,
		Resync:        cfg.kube.resync,
		ClusterDomain: cfg.kube.clusterDomain,
	}, log, kn, kubeInf, scaler, recorder)
}
