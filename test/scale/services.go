package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
)

// services are the run's processes and the broker: Replicas actuators,
// deciders (decider i sends to actuator i) and collectors (each streaming to
// every decider, split by rendezvous hashing), all started with
// test/system's Proc. The collectors and the actuators share the targets
// through bucket Leases in the targets' namespace (leaseBuckets of them),
// as the chart runs them even with one replica; with more, an actuator
// forwards a Scale for a target it does not own to the owner.
type services struct {
	Kafka   *kfake.Cluster
	Brokers []string
	// Procs are every service process, each with its service's name.
	Procs   []serviceProc
	logDir  string
	cfgDir  string
	ownLogs bool
}

// writeKeys writes a Knative ConfigMap's keys into dir, a file per key, as
// the services' --config-* flags read them.
func writeKeys(dir string, keys map[string]string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for k, v := range keys {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type serviceProc struct {
	Service string // collector, decider or actuator
	*system.Proc
}

// startServices brings the services up, actuators first, each waited for
// until it is SERVING. On error it stops what it started.
func startServices(ctx context.Context, binDir string, c *cluster.Cluster, ns string, replicas int, memoryLimit int64, autoscaler map[string]string, logDir string, log io.Writer) (_ *services, err error) {
	s := &services{logDir: logDir}
	defer func() {
		if err != nil {
			_ = s.Stop() // the start error says more
		}
	}()
	if s.logDir == "" {
		if s.logDir, err = os.MkdirTemp("", "tidal-scale-logs-"); err != nil {
			return nil, fmt.Errorf("log directory: %w", err)
		}
		s.ownLogs = true
	}
	if s.cfgDir, err = os.MkdirTemp("", "tidal-scale-config-"); err != nil {
		return nil, fmt.Errorf("config directory: %w", err)
	}
	autoscalerDir, deploymentDir := filepath.Join(s.cfgDir, "autoscaler"), filepath.Join(s.cfgDir, "deployment")
	if err := writeKeys(autoscalerDir, autoscaler); err != nil {
		return nil, fmt.Errorf("config-autoscaler: %w", err)
	}
	// A pod the machine has not made Ready within Knative's progress
	// deadline (10 minutes) has its target scaled to zero as failed, and
	// the run's load, read from pods, cannot wake it: at 10,000 targets
	// the creation backlog outlasted it for 678 of them. The run measures
	// its steady phase, so the deadline outlasts the run's settling.
	if err := writeKeys(deploymentDir, map[string]string{"progress-deadline": "2h"}); err != nil {
		return nil, fmt.Errorf("config-deployment: %w", err)
	}
	if s.Kafka, err = kfake.NewCluster(kfake.NumBrokers(1)); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s.Brokers = s.Kafka.ListenAddrs()
	brokers := strings.Join(s.Brokers, ",")

	start := func(svc, name string, args ...string) (*system.Proc, error) {
		// --pprof lets a run take CPU profiles (Env.ProfileDir); serving it
		// costs nothing until one is asked for.
		p, err := system.NewProc(name, binDir, svc, s.logDir, append(args, "--pprof")...)
		if err != nil {
			return nil, err
		}
		if memoryLimit > 0 {
			// What the service sets itself from its container's cgroup;
			// the run's processes have no cgroup limit of their own.
			p.Env = append(p.Env, "GOMEMLIMIT="+strconv.FormatInt(server.SoftMemoryLimit(memoryLimit), 10))
		}
		if err := p.Start(ctx, time.Minute); err != nil {
			return nil, err
		}
		s.Procs = append(s.Procs, serviceProc{Service: svc, Proc: p})
		fmt.Fprintf(log, "scale: %s serving on %s (metrics %s)\n", name, p.GRPCAddr, p.HTTPAddr)
		return p, nil
	}
	// Bucket Leases even for one replica, as the chart runs the services.
	shared := []string{"--buckets", strconv.Itoa(leaseBuckets), "--lease-namespace", ns}
	var deciders []string
	for i := range replicas {
		a, err := start("actuator", fmt.Sprintf("actuator-%d", i), append([]string{"--scaler", "kubernetes", "--kubeconfig", c.Kubeconfig,
			"--config-autoscaler", autoscalerDir, "--config-deployment", deploymentDir, "--kafka-brokers", brokers}, shared...)...)
		if err != nil {
			return nil, err
		}
		d, err := start("decider", fmt.Sprintf("decider-%d", i), "--actuator-addr", a.GRPCAddr, "--config-autoscaler", autoscalerDir, "--config-deployment", deploymentDir)
		if err != nil {
			return nil, err
		}
		deciders = append(deciders, d.GRPCAddr)
	}
	for i := range replicas {
		name := fmt.Sprintf("collector-%d", i)
		if _, err := start("collector", name, append([]string{"--decider-addr", strings.Join(deciders, ","), "--collector-id", name,
			"--kubeconfig", c.Kubeconfig, "--kafka-brokers", brokers}, shared...)...); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// leaseBuckets is how many bucket Leases replicas share the targets through:
// enough that two to four replicas each get a fair part.
const leaseBuckets = 16

// logPath is where a process's log is (test/system names it so).
func (s *services) logPath(p serviceProc) string { return filepath.Join(s.logDir, p.Name+".log") }

// Stop stops the collectors first, then the deciders and the actuators, so
// no decision is in flight when the actuators go, then the broker.
func (s *services) Stop() error {
	var errs []error
	if !s.ownLogs {
		// Kept logs get each service's last metrics beside them (the
		// histograms of Scale calls and of the write budget's waits).
		for _, p := range s.Procs {
			if err := saveMetrics(p.HTTPAddr, filepath.Join(s.logDir, p.Name+".metrics")); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			}
		}
	}
	for _, svc := range []string{"collector", "decider", "actuator"} {
		for _, p := range s.Procs {
			if p.Service == svc {
				errs = append(errs, p.Stop(15*time.Second))
			}
		}
	}
	if s.Kafka != nil {
		s.Kafka.Close()
	}
	_ = os.RemoveAll(s.cfgDir)
	if s.ownLogs {
		_ = os.RemoveAll(s.logDir)
	}
	return errors.Join(errs...)
}

// saveMetrics writes what a service's /metrics serves to path.
func saveMetrics(httpAddr, path string) error {
	b, err := serviceMetrics(context.Background(), httpAddr)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
