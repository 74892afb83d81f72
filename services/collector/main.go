// Command tidal-collector measures targets and streams their metrics to the
// deciders.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tidalscale/tidal/collector/history"
	"github.com/tidalscale/tidal/collector/stream"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	"github.com/tidalscale/tidal/services/server"
)

type config struct {
	server      server.Config
	deciderAddr string
	collectorID string
	retention   time.Duration
	minBackoff  time.Duration
	maxBackoff  time.Duration
}

func (c *config) registerFlags(fs *flag.FlagSet) {
	c.server.RegisterFlags(fs, "127.0.0.1:9001", "127.0.0.1:9011")
	host, _ := os.Hostname()
	fs.StringVar(&c.deciderAddr, "decider-addr", "127.0.0.1:9002", "Decider gRPC address, host:port.")
	fs.StringVar(&c.collectorID, "collector-id", host, "Name of this collector in its streams to deciders; defaults to the host name.")
	fs.DurationVar(&c.retention, "history", 2*time.Minute, "How much history is kept per target and replayed to a decider that reconnects; at least the longest stable window plus scale-down delay.")
	fs.DurationVar(&c.minBackoff, "reconnect-min-backoff", 100*time.Millisecond, "First wait before reconnecting a broken decider stream.")
	fs.DurationVar(&c.maxBackoff, "reconnect-max-backoff", 5*time.Second, "Longest wait between reconnects.")
}

func (c *config) validate() error {
	if err := c.server.Validate(); err != nil {
		return err
	}
	if c.deciderAddr == "" {
		return errors.New("--decider-addr: required")
	}
	if c.collectorID == "" || len(c.collectorID) > 253 {
		return fmt.Errorf("--collector-id %q: want 1 to 253 bytes", c.collectorID)
	}
	if c.retention < 10*time.Second {
		return fmt.Errorf("--history %s: want at least 10s", c.retention)
	}
	if c.minBackoff <= 0 || c.maxBackoff < c.minBackoff {
		return fmt.Errorf("--reconnect-min-backoff %s, --reconnect-max-backoff %s: want 0 < min <= max", c.minBackoff, c.maxBackoff)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tidal-collector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("tidal-collector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.registerFlags(fs)
	if err := server.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	log, err := server.NewLogger("collector", cfg.server.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	store := history.New(cfg.retention)
	conn, err := grpc.NewClient(cfg.deciderAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("decider client %s: %w", cfg.deciderAddr, err)
	}
	defer func() { _ = conn.Close() }()
	h := newHandler(store, cfg.deciderAddr, time.Now, log, reg)
	sender := stream.New(stream.Config{
		CollectorID: cfg.collectorID,
		MinBackoff:  cfg.minBackoff,
		MaxBackoff:  cfg.maxBackoff,
	}, store, conn, log.With(zap.String("decider", cfg.deciderAddr)), h.setConnected)

	srv := server.New(cfg.server, log, reg)
	collectorv1.RegisterCollectorServiceServer(srv.GRPC(), h)
	if _, _, err := srv.Listen(); err != nil {
		return err
	}
	// Pushed stats are kept and replayed, so the collector can take them
	// before a decider is reachable: it is ready once it listens.
	srv.SetReady(true)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error { return sender.Run(gctx) })
	return g.Wait()
}
