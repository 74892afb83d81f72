// Command scale is `make scale`: it starts a test cluster, the three
// services as processes and thousands of targets with simulated pods and
// switching load, then prints what the run measured (package test/scale).
//
//	go run ./test/scale/cmd/scale -kpa 1000 -lag 100 -for 3m
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/scale"
	"github.com/tidalscale/tidal/test/system"
)

// namespace holds every target; the cluster is the run's own.
const namespace = "scale"

func main() {
	var cfg scale.Config
	cfg.RegisterFlags(flag.CommandLine)
	logDir := flag.String("log-dir", "", "Keep the services' logs in this directory; empty means a temporary one, removed at the end.")
	profileDir := flag.String("profile-dir", "", "Write a CPU profile of each service, the harness and the API server over the steady phase into this directory (<process>.cpu.pprof, for go tool pprof), and each service's heap at its end; empty means none.")
	flag.Parse()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once; children die with us (Pdeathsig)
	}()
	if err := run(ctx, cfg, *logDir, *profileDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg scale.Config, logDir, profileDir string, out io.Writer) error {
	start := time.Now()
	// Made before the cluster starts, as the flag's help promises a
	// directory to keep the logs in.
	if logDir != "" {
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return err
		}
	}
	c, err := cluster.Start(ctx, scale.ClusterOptions(cfg, namespace, out))
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer c.Stop()
	rev := revision() // what the services are built from, not what the tree holds when the run ends
	binDir, err := system.BuildTemp(ctx, out)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(binDir) }()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	rep, err := scale.Run(ctx, cfg, scale.Env{Cluster: c, Namespace: namespace, BinDir: binDir, LogDir: logDir, ProfileDir: profileDir, Log: out})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s, %s, %d CPUs (%s), %.1f GiB, run took %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), rev, numCPU(), cpuModel(), memGiB(), time.Since(start).Round(time.Second))
	rep.Write(out)
	return nil
}

// revision is the checkout's commit, and the paths with uncommitted
// changes: the services are built from the working tree, so a report says
// what it measured.
func revision() string {
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "commit unknown"
	}
	out := "commit " + strings.TrimSpace(string(rev))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		var paths []string
		// Not TrimSpace: a porcelain line starts with its status columns,
		// the first often a space.
		for _, l := range strings.Split(strings.TrimRight(string(st), "\n"), "\n") {
			if len(l) > 3 {
				paths = append(paths, l[3:])
			}
		}
		out += " with uncommitted changes to " + strings.Join(paths, ", ")
	}
	return out
}

func numCPU() int { return runtime.NumCPU() }

// cpuModel is the first CPU's model name, as the kernel reports it.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}

// memGiB is the machine's memory.
func memGiB() float64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return float64(si.Totalram) * float64(si.Unit) / (1 << 30)
}
