// Command tidal-collector measures targets and streams their metrics to the
// deciders.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/activator"
	"github.com/tidalscale/tidal/collector/deciders"
	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/kedascaler"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/collector/targets"
	"github.com/tidalscale/tidal/keyval"
	"github.com/tidalscale/tidal/knativeconfig"
	"github.com/tidalscale/tidal/proto/externalscaler"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	"github.com/tidalscale/tidal/services/kube"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/shard/bucket"
)

// defaultDecider is the decider address when none is configured.
const defaultDecider = "127.0.0.1:9002"

// Discovery modes.
const (
	discoveryAuto       = "auto"
	discoveryKubernetes = "kubernetes"
	discoveryPush       = "push"
)

type config struct {
	server    server.Config
	discovery string
	kube      kube.Config
	retention time.Duration

	deciderAddrs   []string
	shadowAddrs    []string
	maxTargets     int
	pushedTTL      time.Duration
	deciderService string
	deciderDNS     string
	dnsInterval    time.Duration

	stream  dispatch.StreamsConfig
	scrape  scrape.Config
	lag     lag.Config
	keda    kedascaler.Config
	targets targets.Config
	bucket  bucket.Config

	// activator serves Knative's activators' websocket stat protocol.
	activator activator.Config
}

func (c *config) RegisterFlags(fs *flag.FlagSet) {
	c.server.RegisterFlags(fs, "127.0.0.1:9001", "127.0.0.1:9011")
	host, _ := os.Hostname()
	fs.StringVar(&c.stream.CollectorID, "collector-id", host, "Name of this collector in its streams to deciders; defaults to the host name.")
	fs.StringVar(&c.discovery, "discovery", discoveryAuto, "Where targets come from: kubernetes (Metric, PodAutoscaler and Function objects), push (any target PushStats names becomes a KPA target), or auto (kubernetes when --kubeconfig is set or in a cluster, else push).")
	c.kube.RegisterFlags(fs, 50, 100)
	fs.DurationVar(&c.retention, "history", 2*time.Minute, "Least history kept per target and replayed to a decider that reconnects or takes the target over; a target keeps at least its stable window plus scale-down delay.")
	fs.Func("decider-addr", "Comma-separated static decider addresses, host:port each; targets are split among them by rendezvous hashing (default "+defaultDecider+" when no other decider flag is set).", func(v string) (err error) {
		c.deciderAddrs, err = parseAddrs(v)
		return err
	})
	fs.Func("shadow-decider-addr", "Comma-separated shadow decider addresses, host:port each: every target streams to each of them besides its decider, to compare a configuration or a version on live data. Point their --actuator-addr at an actuator with --scaler=memory, so they change nothing.", func(v string) (err error) {
		c.shadowAddrs, err = parseAddrs(v)
		return err
	})
	fs.IntVar(&c.maxTargets, "max-targets", 50000, "Targets this collector holds at most; beyond it new targets are refused (a pushed stat with RESOURCE_EXHAUSTED) and counted. 0 means no bound.")
	fs.DurationVar(&c.pushedTTL, "pushed-target-ttl", 10*time.Minute, "With --discovery=push, how long a target that pushed stats created lives without another push; then its decider forgets it too. 0 means forever.")
	fs.StringVar(&c.deciderService, "decider-service", "", "Decider endpoints from a Service's ready pods through the Pods API, as namespace/name:port; needs Kubernetes.")
	fs.StringVar(&c.deciderDNS, "decider-dns", "", "Decider endpoints from a headless Service's DNS name, as host:port, looked up every --decider-dns-interval.")
	fs.DurationVar(&c.dnsInterval, "decider-dns-interval", 5*time.Second, "How often --decider-dns is looked up.")
	c.stream.RegisterFlagsWithPrefix("stream-", fs)
	c.scrape.RegisterFlagsWithPrefix("scrape-", fs)
	c.lag.RegisterFlagsWithPrefix("lag-", fs)
	c.keda.RegisterFlagsWithPrefix("keda-", fs)
	c.activator.RegisterFlagsWithPrefix("activator-", fs)
	c.targets.RegisterFlagsWithPrefix("", fs)
	c.bucket.RegisterFlagsWithPrefix("", fs, "collector")
}

func (c *config) Validate() error {
	if err := c.server.Validate(); err != nil {
		return err
	}
	if err := c.kube.Validate(); err != nil {
		return err
	}
	// One broker policy for every lag source, KEDA's inline triggers too.
	c.keda.Brokers = c.targets.BrokerPolicy()
	switch c.discovery {
	case discoveryAuto:
		c.discovery = discoveryPush
		if c.kube.Kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			c.discovery = discoveryKubernetes
		}
	case discoveryKubernetes, discoveryPush:
	default:
		return fmt.Errorf("--discovery %q: want auto, kubernetes or push", c.discovery)
	}
	n := 0
	for _, set := range []bool{len(c.deciderAddrs) > 0, c.deciderService != "", c.deciderDNS != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("--decider-addr, --decider-service, --decider-dns: want one of them")
	}
	if n == 0 {
		c.deciderAddrs = []string{defaultDecider}
	}
	if c.maxTargets < 0 {
		return fmt.Errorf("--max-targets %d: want at least 0", c.maxTargets)
	}
	if c.pushedTTL < 0 {
		return fmt.Errorf("--pushed-target-ttl %s: want at least 0", c.pushedTTL)
	}
	for _, a := range c.shadowAddrs {
		if slices.Contains(c.deciderAddrs, a) {
			return fmt.Errorf("--shadow-decider-addr %q: is also a --decider-addr; a shadow only watches", a)
		}
	}
	if c.deciderService != "" {
		if _, _, _, err := parseService(c.deciderService); err != nil {
			return err
		}
		if c.discovery != discoveryKubernetes {
			return errors.New("--decider-service: needs Kubernetes (--discovery=kubernetes)")
		}
	}
	if c.deciderDNS != "" {
		if !isHostPort(c.deciderDNS) {
			return fmt.Errorf("--decider-dns %q: want host:port", c.deciderDNS)
		}
		if c.dnsInterval <= 0 {
			return fmt.Errorf("--decider-dns-interval %s: want more than 0", c.dnsInterval)
		}
	}
	if c.retention < 10*time.Second {
		return fmt.Errorf("--history %s: want at least 10s", c.retention)
	}
	c.bucket.Identity = c.server.Advertise()
	if c.bucket.Buckets > 0 && c.discovery != discoveryKubernetes {
		return errors.New("--buckets: needs Kubernetes (--discovery=kubernetes)")
	}
	for _, v := range []struct {
		validate func(string) error
		prefix   string
	}{{c.stream.Validate, "stream-"}, {c.scrape.Validate, "scrape-"}, {c.lag.Validate, "lag-"}, {c.keda.Validate, "keda-"}, {c.activator.Validate, "activator-"}, {c.bucket.Validate, ""}} {
		if err := v.validate(v.prefix); err != nil {
			return err
		}
	}
	return nil
}

// parseService reads namespace/name:port.
func parseService(v string) (ns, name string, port int, err error) {
	hostPort, portStr, err := net.SplitHostPort(v)
	if err == nil {
		port, err = strconv.Atoi(portStr)
	}
	ns, name, ok := strings.Cut(hostPort, "/")
	if err != nil || !ok || ns == "" || name == "" || port < 1 || port > 65535 {
		return "", "", 0, fmt.Errorf("--decider-service %q: want namespace/name:port", v)
	}
	return ns, name, port, nil
}

func main() { server.Main("tidal-collector", run) }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	if err := server.Parse("tidal-collector", &cfg, args, stderr); err != nil {
		return err
	}
	log, err := server.NewLogger("collector", cfg.server.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	hub := dispatch.New(dispatch.Config{Retention: cfg.retention, HighWater: cfg.stream.HighWater, Batch: cfg.stream.BatchSamples, Shadows: cfg.shadowAddrs,
		MaxTargets: cfg.maxTargets, PushedTTL: cfg.pushedTTL}, dispatch.NewMetrics(reg), log)
	dial, err := cfg.server.DialOption(server.RoleDecider)
	if err != nil {
		return err
	}
	streams := dispatch.NewStreams(cfg.stream, hub, log, dial)
	scraper := scrape.New(cfg.scrape, hub, scrape.NewMetrics(reg), log)
	fetcher := lag.New(cfg.lag, hub, lag.NewMetrics(reg), log)

	// Every component runs in g: one failure stops them all, and run
	// returns only once all of them have returned. A start step that fails
	// after some have started stops them with abort.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	abort := func(err error) error {
		cancel()
		if werr := g.Wait(); werr != nil || ctx.Err() != nil {
			return werr // the failure that stopped start-up, or a requested shutdown
		}
		return err
	}
	var (
		disc    *targets.Discovery
		buckets *bucket.Set
		kube    kubernetes.Interface
		dyn     dynamic.Interface
		knCfg   *knativeconfig.Watcher
	)
	if cfg.discovery == discoveryKubernetes {
		rc, err := cfg.kube.RestConfig("tidal-collector")
		if err != nil {
			return err
		}
		kube, err = kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		tidal, err := tidalclient.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("tidal client: %w", err)
		}
		if dyn, err = dynamic.NewForConfig(rc); err != nil {
			return fmt.Errorf("dynamic client: %w", err)
		}
		disc = targets.New(cfg.targets, kube, tidal, hub, scraper, fetcher, log)
		disc.RegisterMetrics(reg)
		if err := disc.UseKnative(rc); err != nil { // --knative
			return err
		}
		if cfg.targets.Knative.Enabled {
			if knCfg, err = knativeConfig(&cfg, kube, disc, hub, reg, log); err != nil {
				return err
			}
		}
		if cfg.bucket.Buckets > 0 {
			buckets = bucket.New(cfg.bucket, kube, disc.Resync, reg, log)
			disc.SetOwnership(buckets.Owns)
		}
	}

	var pods readyPodNames
	var owner ownerOf
	// KEDA's external scaler answers from the deciders over the streams'
	// connections; without Kubernetes only a Function's target is known.
	var kedaTargets kedascaler.Targets = kedascaler.PushTargets{}
	if disc != nil {
		pods, kedaTargets = disc.ReadyPodNames, kubeTargets{disc}
	}
	if buckets != nil {
		owner = bucketOwners{buckets}.Owner
	}
	h := newHandler(hub, cfg.discovery == discoveryPush, pods, owner, time.Now, reg)
	srv := server.New(cfg.server, log, reg)
	collectorv1.RegisterCollectorServiceServer(srv.GRPC(), h)
	kedaDecisions := kedascaler.NewRemote(cfg.keda, deciderRouter{hub, streams}, reg, log)
	inline, peers, err := kedaInline(&cfg, hub, fetcher, buckets, reg, log)
	if err != nil {
		return err
	}
	defer peers.Close()
	kedaServer := kedascaler.New(cfg.keda, kedaTargets, kedaDecisions, inline, server.Caller, reg, log)
	if dyn != nil {
		// KEDA does not send a trigger's metricType: read it from the
		// ScaledObject, so a Value metric that would scale wrongly is
		// refused.
		kedaServer.SetScaledObjects(newKubeScaledObjects(dyn))
	}
	externalscaler.RegisterExternalScalerServer(srv.GRPC(), kedaServer)
	collectorv1.RegisterKEDATargetServiceServer(srv.GRPC(), kedascaler.NewTargetService(inline))
	g.Go(func() error { return kedaDecisions.Run(gctx) })
	g.Go(func() error { return inline.Triggers.Run(gctx) })
	activatorWS := activatorEndpoint(gctx, g, &cfg, hub, buckets, peers, disc, srv, reg, log)
	if _, _, err := srv.Listen(); err != nil {
		return err
	}
	g.Go(func() error { return srv.Run(gctx) })

	// Decider endpoints.
	switch {
	case len(cfg.deciderAddrs) > 0:
		streams.SetDeciders(cfg.deciderAddrs)
	case cfg.deciderService != "":
		ns, name, port, _ := parseService(cfg.deciderService)
		found := make(chan struct{})
		var once sync.Once
		g.Go(func() error {
			return deciders.WatchService(gctx, kube, ns, name, port, func(addrs []string) {
				streams.SetDeciders(addrs)
				once.Do(func() { close(found) })
			}, log)
		})
		// The first list of endpoints (maybe empty) before reporting ready.
		select {
		case <-found:
		case <-gctx.Done():
			return abort(gctx.Err())
		}
	default:
		host, portStr, _ := net.SplitHostPort(cfg.deciderDNS)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return abort(fmt.Errorf("--decider-dns %q: %w", cfg.deciderDNS, err))
		}
		g.Go(func() error {
			deciders.WatchDNS(gctx, host, port, cfg.dnsInterval, streams.SetDeciders, log)
			return nil
		})
	}
	g.Go(func() error { return streams.Run(gctx) })
	g.Go(func() error { return scraper.Run(gctx) })
	g.Go(func() error { return fetcher.Run(gctx) })
	if buckets != nil {
		g.Go(func() error { return buckets.Run(gctx) })
	}
	if knCfg != nil {
		// Knative's configuration before any target is set up with the
		// flags' instead.
		g.Go(func() error { return knCfg.Run(gctx) })
		if !cache.WaitForCacheSync(gctx.Done(), knCfg.HasSynced) {
			return abort(gctx.Err())
		}
	}
	if disc != nil {
		// Prime before reporting ready: informers synced, targets set up.
		if err := disc.Start(gctx); err != nil {
			return abort(err)
		}
		g.Go(func() error { return disc.Run(gctx) })
	}
	// Activators connect once targets are primed, so the first stats find
	// them; Knative's activators keep redialling until then.
	if activatorWS != nil {
		addr, err := activatorWS.Listen()
		if err != nil {
			return abort(err)
		}
		log.Info("serving Knative's activator stat protocol", zap.Stringer("addr", addr))
		g.Go(func() error { return activatorWS.Run(gctx) })
	}
	// Samples are kept and replayed, so the collector can measure and take
	// pushed stats before a decider is reachable: ready once primed.
	srv.SetReady(true)
	return g.Wait()
}

// parseAddrs parses a comma-separated list of host:port addresses.
func parseAddrs(v string) ([]string, error) {
	out := keyval.List(v)
	for _, a := range out {
		if !isHostPort(a) {
			return nil, fmt.Errorf("%q: want host:port", a)
		}
	}
	return out, nil
}

// isHostPort reports whether a is host:port with a port number: ":" and
// "host:" split without error, then fail only when dialled.
func isHostPort(a string) bool {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 1 && p <= 65535
}
