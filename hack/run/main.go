// Command run is `make run`: tidal's whole loop on one machine. It builds
// what is missing, starts a Kubernetes control plane (test/cluster), a Kafka
// broker (kfake), the collector, decider and actuator as separate processes,
// one KPA workload and one Function, and drives them through a load profile
// that shows scale-up, panic, scale-down, scale to zero and back, printing
// a live table per target. At the end it prints what users felt and what it
// cost, writes a plot, and stops everything it started.
//
//	go run ./hack/run -for 3m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/workload"
)

// namespace holds the demo's objects; the cluster is the run's own.
const namespace = "demo"

// phase is one step of the load profile.
type phase struct {
	at   time.Duration
	name string
	// web is the KPA workload's request rate, fn the Function's produce
	// rate (records per second).
	web, fn float64
}

// script shows every behaviour within three minutes, with a 6 s stable
// window, a 6 s scale-to-zero grace and a 5 s idle timeout.
var script = []phase{
	{0, "warm-up: web serves 10 req/s on one pod; fn is idle at zero", 10, 0},
	{20 * time.Second, "step: web 10 → 300 req/s (panic, scale-up within two ticks); fn gets a burst of records (lag scale-up, capped at 4 partitions)", 300, 400},
	{23 * time.Second, "web holds 300 req/s (steady scale); fn's consumers drain the backlog", 300, 0},
	{60 * time.Second, "web drops to 60 req/s: scale-down, at most halving per tick (max-scale-down-rate 2)", 60, 0},
	{80 * time.Second, "load removed: web goes to zero after a window of zeros and the grace period; fn after its idle timeout", 0, 0},
	{115 * time.Second, "requests return: the activator's stat pokes web out of zero; fn gets 60 records/s", 50, 60},
	{145 * time.Second, "all quiet: both scale to zero again", 0, 0},
}

// cycle is the script's length; a run longer than it starts the script over.
const cycle = 175 * time.Second

var kpaAnnotations = map[string]string{
	"autoscaling.knative.dev/window":                        "6s",
	"autoscaling.knative.dev/panic-window-percentage":       "50",
	"autoscaling.knative.dev/target":                        "10",
	"autoscaling.knative.dev/target-utilization-percentage": "70",
}

func main() {
	var (
		forFlag  = flag.String("for", "", "How long to run the load profile (e.g. 3m); empty runs until Ctrl-C, repeating the profile every "+cycle.String()+".")
		plotPath = flag.String("plot", "", "Where to write the PNG plot; empty means bin/run-<time>.png in the checkout.")
		logDir   = flag.String("log-dir", "", "Keep the services' logs in this directory; empty means a temporary one, removed at the end.")
	)
	flag.Parse()
	var length time.Duration
	if *forFlag != "" {
		d, err := time.ParseDuration(*forFlag)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "run: -for %q: want a positive duration such as 3m\n", *forFlag)
			os.Exit(2)
		}
		length = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once; children die with us (Pdeathsig)
	}()
	if err := run(ctx, os.Stdout, length, *plotPath, *logDir); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, length time.Duration, plotPath, logDir string) (err error) {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if plotPath == "" {
		plotPath = filepath.Join(root, "bin", "run-"+time.Now().Format("20060102-150405")+".png")
	}
	fmt.Fprintln(out, "tidal run: building what is missing (the Kubernetes control plane is built once and cached; a cold build takes about 10 minutes)")
	c, err := cluster.Start(ctx, cluster.Options{Log: out})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer func() {
		fmt.Fprintln(out, "stopping the cluster")
		c.Stop()
	}()
	binDir, err := system.BuildTemp(ctx, out)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(binDir) }()

	sys, err := system.Start(ctx, system.Options{
		BinDir: binDir, Cluster: c, Kafka: true, LogDir: logDir, KeepLogs: logDir != "",
		AutoscalerConfig: map[string]string{"scale-to-zero-grace-period": "6s"},
		Log:              out,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping the services")
		if serr := sys.Stop(); serr != nil && err == nil && ctx.Err() == nil {
			err = serr
		}
	}()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	if err := waitServiceAccount(ctx, c); err != nil {
		return err
	}

	webLoad, fnLoad := system.NewDial(script[0].web), system.NewDial(script[0].fn)
	web, err := sys.StartKPA(ctx, system.KPAOptions{
		Namespace: namespace, Name: "web", Annotations: kpaAnnotations, Replicas: 1, Profile: webLoad,
		Model: workload.ModelConfig{ServiceTime: 100 * time.Millisecond, ColdStart: 500 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	defer web.Stop()
	idle := 5 * time.Second
	fn, err := sys.StartFunction(ctx, system.FunctionOptions{
		Namespace: namespace, Name: "fn", Topic: "orders", Partitions: 4, IdleTimeout: &idle,
		Produce: fnLoad, RatePerPod: 40, ColdStart: 300 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer fn.Stop()

	printHints(out, sys)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if length > 0 {
		runCtx, cancel = context.WithTimeout(ctx, length)
		defer cancel()
	}
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 1)
	wg.Go(func() {
		if err := sys.RunActivator(runCtx, web, time.Second); err != nil {
			select {
			case errc <- err:
			default:
			}
		}
	})

	obs, err := sys.NewObserver()
	if err != nil {
		return err
	}
	defer obs.Close()
	targets := []system.Target{web, fn}
	names := []string{"web (kpa)", "fn (lag)"}
	ledgers := make([]system.Ledger, len(targets))
	current := -1
	rows := 0
	wg.Go(func() {
		obs.Follow(runCtx, targets, 2*time.Second, 1200*time.Millisecond, func(i int, s system.Sample) {
			if i == 0 {
				if p := phaseAt(time.Since(start)); p != current {
					current = p
					fmt.Fprintf(out, "\n== %s\n", script[p].name)
					rows = 0
				}
				if rows%20 == 0 {
					fmt.Fprintln(out, system.TableHeader)
				}
				rows++
			}
			ledgers[i].Add(s)
			system.WriteRow(out, start, names[i], s)
		}, func(err error) { fmt.Fprintf(out, "  (sample: %v)\n", err) })
	})
	// Drive the profile and watch the processes.
	var failed error
	for p := -1; failed == nil; {
		if q := phaseAt(time.Since(start)); q != p {
			p = q
			webLoad.Set(script[p].web)
			fnLoad.Set(script[p].fn)
		}
		for _, proc := range sys.Procs() {
			if !proc.Running() {
				failed = fmt.Errorf("%s exited:\n%s", proc.Name, proc.LogTail(30))
			}
		}
		select {
		case <-runCtx.Done():
		case err := <-errc:
			failed = err
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(out, "\ninterrupted: ending early")
	}

	fmt.Fprintf(out, "\n== summary after %s\n", time.Since(start).Round(time.Second))
	fmt.Fprintf(out, "web (kpa): %s\n", web.Experience(&ledgers[0]))
	fmt.Fprintf(out, "fn (lag): records %d produced, %d processed; cold starts %d; cost %.0f pod-seconds\n",
		fn.Producer.Produced(), fn.Consumers.Processed(), ledgers[1].ColdStarts, ledgers[1].PodSeconds)
	if err := os.MkdirAll(filepath.Dir(plotPath), 0o755); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := writePlot(plotPath, start, []series{
		{name: "web (kpa)", loadUnit: "requests/s", samples: ledgers[0].Samples},
		{name: "fn (lag)", loadUnit: "records/s", samples: ledgers[1].Samples},
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "plot: %s\n", plotPath)
	if logDir != "" {
		fmt.Fprintf(out, "service logs: %s\n", logDir)
	}
	return failed
}

// phaseAt returns the script's phase at elapsed time, repeating the script
// every cycle.
func phaseAt(elapsed time.Duration) int {
	starts := make([]time.Duration, len(script))
	for i, ph := range script {
		starts[i] = ph.at
	}
	return system.PhaseAt(elapsed, cycle, starts)
}

func printHints(out io.Writer, sys *system.System) {
	grpcurl := "go tool -modfile=tools/go.mod grpcurl -plaintext"
	web := `'{"target":{"namespace":"` + namespace + `","name":"web"}}'`
	fnRef := `'{"target":{"namespace":"` + namespace + `","name":"fn"}}'`
	fmt.Fprintf(out, `
tidal is running: collector %s, decider %s, actuator %s, Kafka %s.
Inspect it from another terminal in this checkout:
  %[5]s %[2]s list
  %[5]s %[2]s tidal.decider.v1.DeciderService/ListDecisions
  %[5]s -d %[6]s %[2]s tidal.decider.v1.DeciderService/Explain
  %[5]s -d %[7]s %[2]s tidal.decider.v1.DeciderService/Explain
  %[5]s %[2]s tidal.decider.v1.DeciderService/WatchDecisions
  %[5]s -d %[6]s %[3]s tidal.actuator.v1.ActuatorService/GetScale
  %[5]s %[1]s grpc.health.v1.Health/Check
  kubectl --kubeconfig %[8]s -n %[9]s get deployments,podautoscalers,functions,topics
Ctrl-C ends the run early; everything started is stopped.
`, sys.Collectors[0].GRPCAddr, sys.Decider.GRPCAddr, sys.Actuator.GRPCAddr, sys.Brokers[0],
		grpcurl, web, fnRef, sys.Cluster.Kubeconfig, namespace)
}

func waitServiceAccount(ctx context.Context, c *cluster.Cluster) error {
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// repoRoot is the checkout: the nearest directory above the working
// directory with a go.mod, which `make run` runs from.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run: not inside the tidal checkout (no go.mod found)")
		}
		dir = parent
	}
}
