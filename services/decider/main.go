// Command tidal-decider applies each target's scaling strategy on one tick
// loop and sends its decisions to the actuator. It holds only what its
// collectors' streams can rebuild.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/knmetrics"
	"github.com/tidalscale/tidal/decider/loop"
	"github.com/tidalscale/tidal/decider/sender"
	"github.com/tidalscale/tidal/decider/watch"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

type config struct {
	server         server.Config
	actuatorAddr   string
	autoscalerDir  string
	deploymentDir  string
	tickInterval   time.Duration
	tickResolution time.Duration
	tickLateness   time.Duration
	tickHold       time.Duration
	maxTargets     int
	send           sender.Config
	watch          watch.Config
}

func (c *config) RegisterFlags(fs *flag.FlagSet) {
	c.server.RegisterFlags(fs, "127.0.0.1:9002", "127.0.0.1:9012")
	fs.StringVar(&c.actuatorAddr, "actuator-addr", "127.0.0.1:9003", "Actuator gRPC address, host:port.")
	fs.StringVar(&c.autoscalerDir, "config-autoscaler", "", "Directory holding Knative's config-autoscaler keys, one file per key (a mounted ConfigMap); empty means Knative's defaults.")
	fs.StringVar(&c.deploymentDir, "config-deployment", "", "Directory holding Knative's config-deployment keys (progress-deadline); empty means the defaults.")
	fs.DurationVar(&c.tickInterval, "tick-interval", 2*time.Second, "KPA decision interval, aligned to Unix time (Knative's is 2s).")
	fs.DurationVar(&c.tickResolution, "tick-resolution", 100*time.Millisecond, "How often the tick loop runs; lag targets are decided at their own interval on it.")
	fs.DurationVar(&c.tickLateness, "tick-lateness", 500*time.Millisecond, "How long after a KPA grid time its decision waits at most for samples stamped before it: the tick is made at the grid time once every collector stream says its scrapes up to then are in (a stream that says nothing, or an older collector, keeps the wait). A sample later than that counts from the next tick on, so a restarted decider may decide it apart.")
	fs.DurationVar(&c.tickHold, "tick-hold", 10*time.Second, "How long KPA decisions wait for samples when all of them stop coming at once (a stalled collector or stream, not idle workloads), rather than read the gap as idle and scale loaded targets towards zero; the ticks held are then made in order, as they would have been on time. tidal_decider_ticks_behind_seconds shows a hold. 0 disables.")
	fs.IntVar(&c.maxTargets, "max-targets", 50000, "Targets this decider holds at most; specs of new targets beyond it are refused and counted (tidal_decider_dropped_samples_total{reason=\"target_limit\"}). 0 means no bound.")
	fs.BoolVar(&c.send.DryRun, "dry-run", false, "Send every Scale call as a dry run: the actuator reports and changes nothing.")
	fs.IntVar(&c.send.Workers, "scale-workers", 64, "Scale calls to the actuator in flight at once, each for a different target.")
	fs.DurationVar(&c.send.Timeout, "scale-timeout", 5*time.Second, "Timeout of one Scale call.")
	fs.DurationVar(&c.send.RetryMin, "scale-retry-min", 100*time.Millisecond, "First backoff before a failed Scale call is retried; it doubles per failure.")
	fs.DurationVar(&c.send.RetryMax, "scale-retry-max", 5*time.Second, "Longest backoff before a failed Scale call is retried.")
	fs.DurationVar(&c.send.Refresh, "scale-refresh", 30*time.Second, "How long the decision the actuator took last for a target goes unsent before it is sent again (behind every new decision), while no newer one comes and until the actuator answers that the target's status records it: the replica that applied it may have stopped before recording it (--status-interval), and the one that took over applies it. 0 sends each decision once.")
	c.watch.RegisterFlagsWithPrefix("", fs)
}

func (c *config) Validate() error {
	if err := c.server.Validate(); err != nil {
		return err
	}
	if c.actuatorAddr == "" {
		return errors.New("--actuator-addr: required")
	}
	if c.tickInterval < time.Second || c.tickInterval%time.Second != 0 {
		return fmt.Errorf("--tick-interval %s: want a whole number of seconds, at least 1s", c.tickInterval)
	}
	if c.tickResolution <= 0 || c.tickResolution > c.tickInterval {
		return fmt.Errorf("--tick-resolution %s: want more than 0 and at most --tick-interval", c.tickResolution)
	}
	if c.tickLateness < 0 || c.tickLateness >= c.tickInterval {
		return fmt.Errorf("--tick-lateness %s: want at least 0 and less than --tick-interval", c.tickLateness)
	}
	if c.tickHold < 0 || c.tickHold > time.Minute {
		return fmt.Errorf("--tick-hold %s: want 0s to 1m", c.tickHold)
	}
	if c.maxTargets < 0 {
		return fmt.Errorf("--max-targets %d: want at least 0", c.maxTargets)
	}
	if err := c.send.Validate(); err != nil {
		return fmt.Errorf("--scale-*: %w", err)
	}
	return c.watch.Validate()
}

func loadEngineConfig(c *config) (engine.Config, error) {
	kcfg, err := server.ParseConfigDir("config-autoscaler", c.autoscalerDir, kpaconfig.ParseConfig)
	if err != nil {
		return engine.Config{}, err
	}
	dcfg, err := server.ParseConfigDir("config-deployment", c.deploymentDir, kpaconfig.ParseDeploymentConfig)
	if err != nil {
		return engine.Config{}, err
	}
	return engine.Config{KPA: kcfg, Deployment: dcfg, TickInterval: c.tickInterval, Lateness: c.tickLateness, Hold: c.tickHold, MaxTargets: c.maxTargets}, nil
}

// indexAge is how stale the sorted index behind ListDecisions and a new
// watcher's first decisions may be: rebuilding it costs a sort of every
// target, so a burst of page requests shares one.
const indexAge = time.Second

func main() { server.Main("tidal-decider", run) }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	if err := server.Parse("tidal-decider", &cfg, args, stderr); err != nil {
		return err
	}
	ecfg, err := loadEngineConfig(&cfg)
	if err != nil {
		return err
	}
	log, err := server.NewLogger("decider", cfg.server.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	f := promauto.With(reg)
	drops := f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_decider_dropped_samples_total",
		Help: "Samples refused by the decider, by reason; target_limit counts target specs refused at --max-targets.",
	}, []string{"reason"})
	ecfg.OnDrop = func(reason string) { drops.WithLabelValues(reason).Inc() }
	configRefused := f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_decider_knative_config_refused_total",
		Help: "Knative configurations from collectors refused as invalid, by ConfigMap; the configuration in effect stayed.",
	}, []string{"configmap"})
	eng := engine.New(ecfg)
	// Knative's autoscaler metrics for the Knative Revisions (knmetrics).
	reg.MustRegister(knmetrics.New(eng))
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_decider_targets",
		Help: "Targets this decider holds.",
	}, func() float64 { return float64(eng.Len()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_decider_ticks_behind_seconds",
		Help: "How far the KPA decisions are behind their due time: above --tick-interval while they wait for samples that stopped coming (--tick-hold).",
	}, func() float64 { return eng.Behind(time.Now()).Seconds() })

	creds, err := cfg.server.DialOption(server.RoleActuator)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(cfg.actuatorAddr, creds)
	if err != nil {
		return fmt.Errorf("actuator client %s: %w", cfg.actuatorAddr, err)
	}
	defer func() { _ = conn.Close() }()
	snd := sender.New(cfg.send, actuatorv1.NewActuatorServiceClient(conn), eng.Has, log.With(zap.String("actuator", cfg.actuatorAddr)), reg)
	h := &handler{
		engine: eng,
		// A listing may miss a target added in its last second (indexAge).
		index: engine.NewIndex(eng, indexAge, time.Now),
		hub:   watch.NewHub(cfg.watch, reg),
		// The peer's address until callers are authenticated.
		caller: server.Caller,
		sender: snd,
		now:    time.Now,
		log:    log,
		drops:  drops,

		configRefused: configRefused,
	}

	srv := server.New(cfg.server, log, reg)
	deciderv1.RegisterDeciderServiceServer(srv.GRPC(), h)
	if _, _, err := srv.Listen(); err != nil {
		return err
	}
	srv.SetReady(true)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error { return snd.Run(gctx) })
	g.Go(func() error { return loop.Run(gctx, eng, cfg.tickResolution, time.Now, h.decided) })
	return g.Wait()
}
