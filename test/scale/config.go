package scale

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is one scale run.
type Config struct {
	// KPATargets and LagTargets are how many targets of each strategy run.
	KPATargets, LagTargets int
	// Duration is the steady phase after creation and first decisions, during
	// which loads switch and costs are measured.
	Duration time.Duration
	// MinPods and MaxPods bound the replicas a KPA target's load levels imply.
	MinPods, MaxPods int
	// SwitchFraction of the KPA targets switch load every SwitchPeriod.
	SwitchFraction float64
	SwitchPeriod   time.Duration
	// Replicas is how many processes of each service run.
	Replicas int
	// Settle bounds the wait for every target's first decision and for
	// the pods the targets' loads imply before the steady phase starts
	// anyway.
	Settle time.Duration
	// StableWindow is the KPA stable window given to the services in
	// config-autoscaler; the panic window is half of it.
	StableWindow time.Duration
	// CreateWorkers create targets in parallel.
	CreateWorkers int
	// Seed picks each target's load levels.
	Seed uint64
	// MemoryLimit is each service's container memory limit in bytes: the
	// service runs with the Go memory limit it sets itself in such a
	// container (server.SoftMemoryLimit). 0 means none.
	MemoryLimit int64
	// ControlPlaneNice, when above 0, runs the control plane's processes
	// at that nice value (cluster.Options.Nice): the services and the
	// simulated pods take the cores first, as on a cluster where the
	// control plane has machines of its own.
	ControlPlaneNice int
}

// chartMemoryLimit is the chart's default resources.limits.memory of each
// service (charts/tidal/values.yaml).
const chartMemoryLimit = "512Mi"

// RegisterFlags registers the flags of a Config with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.KPATargets, "kpa", 10000, "KPA targets, each a Deployment and a PodAutoscaler whose pods serve simulated queue-proxy metrics.")
	fs.IntVar(&c.LagTargets, "lag", 1000, "Lag targets, each a Function reading its own topic on kfake; 0 means none.")
	fs.DurationVar(&c.Duration, "for", 10*time.Minute, "Length of the steady phase, after creation and first decisions, in which loads switch and costs are measured.")
	c.MinPods, c.MaxPods = 1, 5
	fs.Func("pods", "Replicas a KPA target's load implies, as MIN-MAX (default 1-5); every target gets a low and a high level in this range.", func(v string) error {
		lo, hi, ok := strings.Cut(v, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("%q: want MIN-MAX such as 1-5", v)
		}
		c.MinPods, c.MaxPods = a, b
		return nil
	})
	fs.Float64Var(&c.SwitchFraction, "switch-fraction", 0.2, "Fraction of the KPA targets whose load switches between its two levels; 0 means none.")
	fs.DurationVar(&c.SwitchPeriod, "switch-period", 30*time.Second, "How often a switching target's load changes; the changes are staggered over the period.")
	fs.IntVar(&c.Replicas, "replicas", 1, "Processes of each service: collectors and actuators share targets through bucket Leases, collectors split them among the deciders, each decider sends to its own actuator.")
	fs.DurationVar(&c.Settle, "settle", 30*time.Minute, "Longest wait after creation for every target's first decision and for 99 % of the pods the targets' loads imply before the steady phase starts anyway (it starts as soon as they are there).")
	fs.DurationVar(&c.StableWindow, "stable-window", 6*time.Second, "KPA stable window in config-autoscaler (the panic window is half of it); short, so a load change shows within a tick or two.")
	fs.IntVar(&c.CreateWorkers, "create-workers", 16, "Targets created in parallel.")
	fs.Uint64Var(&c.Seed, "seed", 1, "Seed of each target's load levels.")
	chart := resource.MustParse(chartMemoryLimit)
	c.MemoryLimit = chart.Value()
	fs.Func("memory-limit", "Each service's container memory limit (default "+chartMemoryLimit+", the chart's): the services run with the Go memory limit they set themselves in such a container (90 % of it); 0 means none, as a process outside any limit runs.", func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return fmt.Errorf("%q: want a quantity such as 512Mi, or 0", v[:min(len(v), 32)])
		}
		c.MemoryLimit = q.Value()
		return nil
	})
	fs.IntVar(&c.ControlPlaneNice, "control-plane-nice", 0, "Nice value of the control plane's processes (etcd, API server, controllers, kwok), 0 to 19: above 0 the services and the simulated pods take the cores first, as where the control plane has machines of its own; 0 means they share alike.")
}

// DefaultConfig is the Config of the flags' defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// Validate refuses values the run cannot use.
func (c *Config) Validate() error {
	switch {
	case c.KPATargets < 1 || c.KPATargets > 99999:
		return fmt.Errorf("-kpa %d: want 1 to 99999", c.KPATargets)
	case c.LagTargets < 0 || c.LagTargets > 99999:
		return fmt.Errorf("-lag %d: want 0 to 99999", c.LagTargets)
	case c.Duration <= 0:
		return fmt.Errorf("-for %s: want > 0", c.Duration)
	case c.MinPods < 1 || c.MaxPods <= c.MinPods:
		return fmt.Errorf("-pods %d-%d: want 1 <= MIN < MAX, so the two load levels imply different replicas", c.MinPods, c.MaxPods)
	case c.SwitchFraction < 0 || c.SwitchFraction > 1:
		return fmt.Errorf("-switch-fraction %v: want 0 to 1", c.SwitchFraction)
	case c.SwitchPeriod < 5*time.Second:
		return fmt.Errorf("-switch-period %s: want at least 5s", c.SwitchPeriod)
	case c.SwitchFraction > 0 && c.Duration < c.SwitchPeriod:
		return fmt.Errorf("-for %s: want at least -switch-period %s, or no load change has a whole period", c.Duration, c.SwitchPeriod)
	case c.Replicas < 1 || c.Replicas > 4:
		return fmt.Errorf("-replicas %d: want 1 to 4", c.Replicas)
	case c.Settle <= 0:
		return fmt.Errorf("-settle %s: want > 0", c.Settle)
	case c.StableWindow < 6*time.Second:
		return fmt.Errorf("-stable-window %s: want at least 6s (Knative's minimum)", c.StableWindow)
	case c.CreateWorkers < 1:
		return errors.New("-create-workers: want at least 1")
	case c.ControlPlaneNice < 0 || c.ControlPlaneNice > 19:
		return fmt.Errorf("-control-plane-nice %d: want 0 to 19", c.ControlPlaneNice)
	}
	return nil
}
