// Command tidal-actuator applies deciders' decisions: it is the only tidal
// service that writes to Kubernetes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tidalscale/tidal/actuator/scale"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	"github.com/tidalscale/tidal/services/server"
)

type config struct {
	server server.Config
	// scaler selects where replicas are written.
	scaler string
}

func (c *config) registerFlags(fs *flag.FlagSet) {
	c.server.RegisterFlags(fs, "127.0.0.1:9003", "127.0.0.1:9013")
	fs.StringVar(&c.scaler, "scaler", "memory", "Where replicas are written: memory (no cluster; counts live in this process).")
}

func (c *config) validate() error {
	if err := c.server.Validate(); err != nil {
		return err
	}
	if c.scaler != "memory" {
		return fmt.Errorf("--scaler %q: want memory", c.scaler)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tidal-actuator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("tidal-actuator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.registerFlags(fs)
	if err := server.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	log, err := server.NewLogger("actuator", cfg.server.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	applier := scale.New(scale.NewMemory(), time.Now)
	log.Info("scaler", zap.String("kind", cfg.scaler))

	srv := server.New(cfg.server, log, prometheus.NewRegistry())
	actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), newHandler(applier, log))
	if _, _, err := srv.Listen(); err != nil {
		return err
	}
	srv.SetReady(true)
	return srv.Run(ctx)
}
