package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidalscale/tidal/test/cluster"
)

// Options configure a System. The zero value (with BinDir and Cluster set)
// runs one collector, one decider and one actuator with Knative's defaults.
type Options struct {
	// BinDir holds the binaries Build wrote. Required.
	BinDir string
	// LogDir receives one log per process; empty means a new temporary
	// directory, removed by Stop unless KeepLogs.
	LogDir   string
	KeepLogs bool
	// Cluster is the Kubernetes control plane the services talk to.
	// Required.
	Cluster *cluster.Cluster
	// Kafka starts a kfake broker with Topics; its address is passed to the
	// actuator (for deployed functions) and to the collector.
	Kafka bool
	// Topics are created on the broker: name → partitions.
	Topics map[string]int32
	// AutoscalerConfig holds Knative config-autoscaler keys given to both
	// the decider and the actuator as one directory, a key a file, as the
	// chart mounts one ConfigMap into both, so their rules agree.
	AutoscalerConfig map[string]string
	// Collectors is how many collector replicas run; 0 means 1.
	Collectors int
	// Args adds flags per service ("collector", "decider", "actuator").
	Args map[string][]string
	// Reference also runs a second decider for comparison: every collector
	// streams every target to it as a shadow (--shadow-decider-addr), so it
	// sees exactly the samples the main decider sees, and it sends its
	// decisions to an in-memory actuator, so it changes nothing. Fault
	// tests compare the main decider's decisions with it.
	Reference bool
	// StartTimeout bounds each process's start; 0 means 30 s.
	StartTimeout time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// System is the whole tidal loop running against a cluster: the actuator,
// the decider and the collectors as separate processes, and optionally a
// Kafka-protocol broker (kfake) in this process.
type System struct {
	Cluster    *cluster.Cluster
	Actuator   *Proc
	Decider    *Proc
	Collectors []*Proc
	// Kafka is the broker when Options.Kafka is set; Brokers its addresses.
	Kafka   *kfake.Cluster
	Brokers []string
	// RefActuator and RefDecider are the reference loop (Options.Reference).
	RefActuator, RefDecider *Proc
	// LogDir holds each process's log.
	LogDir string

	opts    Options
	tmpDirs []string
	// kafkaDown makes the broker drop every request while set (see
	// SetKafkaReachable).
	kafkaDown atomic.Bool
	stopOnce  sync.Once
}

// Start brings the loop up: the broker (if asked), then the actuator, the
// decider and the collectors, each waited for until its health service says
// SERVING. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *System, err error) {
	if opts.BinDir == "" || opts.Cluster == nil {
		return nil, errors.New("system: BinDir and Cluster are required")
	}
	if opts.Collectors == 0 {
		opts.Collectors = 1
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	s := &System{Cluster: opts.Cluster, opts: opts, LogDir: opts.LogDir}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if s.LogDir == "" {
		dir, err := os.MkdirTemp("", "tidal-system-")
		if err != nil {
			return nil, fmt.Errorf("system: log directory: %w", err)
		}
		s.LogDir = dir
		if !opts.KeepLogs {
			s.tmpDirs = append(s.tmpDirs, dir)
		}
	} else if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("system: log directory: %w", err)
	}

	if opts.Kafka {
		if err := s.startKafka(); err != nil {
			return nil, err
		}
	}

	cfgDir, err := os.MkdirTemp("", "tidal-config-autoscaler-")
	if err != nil {
		return nil, fmt.Errorf("system: config directory: %w", err)
	}
	s.tmpDirs = append(s.tmpDirs, cfgDir)
	keys := make([]string, 0, len(opts.AutoscalerConfig))
	for k := range opts.AutoscalerConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(opts.AutoscalerConfig[k]), 0o644); err != nil {
			return nil, fmt.Errorf("system: config-autoscaler key %s: %w", k, err)
		}
	}

	// The actuator and the deciders read the same config-autoscaler, as the
	// chart mounts one ConfigMap into both.
	actArgs := []string{"--scaler", "kubernetes", "--kubeconfig", opts.Cluster.Kubeconfig, "--config-autoscaler", cfgDir}
	if len(s.Brokers) > 0 {
		actArgs = append(actArgs, "--kafka-brokers", strings.Join(s.Brokers, ","))
	}
	if s.Actuator, err = s.newProc("actuator", "actuator", append(actArgs, opts.Args["actuator"]...)...); err != nil {
		return nil, err
	}
	if err := s.Actuator.Start(ctx, opts.StartTimeout); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "system: actuator serving on %s\n", s.Actuator.GRPCAddr)

	decArgs := []string{"--actuator-addr", s.Actuator.GRPCAddr, "--config-autoscaler", cfgDir}
	if s.Decider, err = s.newProc("decider", "decider", append(decArgs, opts.Args["decider"]...)...); err != nil {
		return nil, err
	}
	if err := s.Decider.Start(ctx, opts.StartTimeout); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "system: decider serving on %s\n", s.Decider.GRPCAddr)
	if opts.Reference {
		if err := s.startReference(ctx, cfgDir); err != nil {
			return nil, err
		}
	}

	for i := range opts.Collectors {
		name := fmt.Sprintf("collector-%d", i)
		args := []string{"--decider-addr", s.Decider.GRPCAddr, "--collector-id", name, "--kubeconfig", opts.Cluster.Kubeconfig}
		if len(s.Brokers) > 0 {
			args = append(args, "--kafka-brokers", strings.Join(s.Brokers, ","))
		}
		if s.RefDecider != nil {
			args = append(args, "--shadow-decider-addr", s.RefDecider.GRPCAddr)
		}
		p, err := s.newProc(name, "collector", append(args, opts.Args["collector"]...)...)
		if err != nil {
			return nil, err
		}
		s.Collectors = append(s.Collectors, p)
		if err := p.Start(ctx, opts.StartTimeout); err != nil {
			return nil, err
		}
		fmt.Fprintf(opts.Log, "system: %s serving on %s\n", name, p.GRPCAddr)
	}
	return s, nil
}

func (s *System) startReference(ctx context.Context, cfgDir string) error {
	var err error
	if s.RefActuator, err = s.newProc("ref-actuator", "actuator", "--scaler", "memory"); err != nil {
		return err
	}
	if err := s.RefActuator.Start(ctx, s.opts.StartTimeout); err != nil {
		return err
	}
	if s.RefDecider, err = s.newProc("ref-decider", "decider", "--actuator-addr", s.RefActuator.GRPCAddr, "--config-autoscaler", cfgDir); err != nil {
		return err
	}
	if err := s.RefDecider.Start(ctx, s.opts.StartTimeout); err != nil {
		return err
	}
	fmt.Fprintf(s.opts.Log, "system: reference loop: the collectors' shadow decider %s → in-memory actuator %s\n",
		s.RefDecider.GRPCAddr, s.RefActuator.GRPCAddr)
	return nil
}

func (s *System) newProc(name, svc string, args ...string) (*Proc, error) {
	return NewProc(name, s.opts.BinDir, svc, s.LogDir, args...)
}

// startKafka starts kfake on a free loopback port with the topics and a
// control hook that, while the broker is "down", drops every request by
// closing the connection, as an unreachable broker looks to a client.
func (s *System) startKafka() error {
	opts := []kfake.Opt{kfake.NumBrokers(1)} // kfake listens on 127.0.0.1
	for topic, parts := range s.opts.Topics {
		opts = append(opts, kfake.SeedTopics(parts, topic))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("system: kafka: %w", err)
	}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if s.kafkaDown.Load() {
			return nil, errors.New("broker unreachable (fault injected)"), true
		}
		return nil, nil, false
	})
	s.Kafka, s.Brokers = c, c.ListenAddrs()
	fmt.Fprintf(s.opts.Log, "system: kafka (kfake) on %s\n", strings.Join(s.Brokers, ","))
	return nil
}

// SetKafkaReachable makes the broker answer (true) or drop every request and
// close the connection (false).
func (s *System) SetKafkaReachable(up bool) { s.kafkaDown.Store(!up) }

// Procs returns every service process.
func (s *System) Procs() []*Proc {
	var ps []*Proc
	for _, p := range []*Proc{s.Actuator, s.Decider} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	ps = append(ps, s.Collectors...)
	for _, p := range []*Proc{s.RefDecider, s.RefActuator} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// Stop stops the collectors, the decider and the actuator (in that order,
// so no decision is in flight when the actuator goes) and the broker, and
// removes the temporary directories. It returns the processes that did not
// stop cleanly on SIGTERM.
func (s *System) Stop() error {
	var errs []error
	s.stopOnce.Do(func() {
		for _, p := range s.Collectors {
			if p != nil {
				errs = append(errs, p.Stop(10*time.Second))
			}
		}
		for _, p := range []*Proc{s.RefDecider, s.RefActuator} {
			if p != nil {
				errs = append(errs, p.Stop(10*time.Second))
			}
		}
		for _, p := range []*Proc{s.Decider, s.Actuator} {
			if p != nil {
				errs = append(errs, p.Stop(10*time.Second))
			}
		}
		if s.Kafka != nil {
			s.Kafka.Close()
		}
		for _, d := range s.tmpDirs {
			_ = os.RemoveAll(d)
		}
	})
	return errors.Join(errs...)
}
