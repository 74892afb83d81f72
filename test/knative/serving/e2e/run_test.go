package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/serving/pkg/activator"

	"github.com/tidalscale/tidal/test/system"
)

// runFor turns TestKnativeRun on: `make run KNATIVE=1` runs this test
// binary with it, as the Knative scene of `make run`. Off by default, the
// test is skipped: it checks nothing the other tests do not, it shows.
var runFor = flag.Duration("knative-run-for", 0, "Run the Knative scene of `make run KNATIVE=1` for this long (the script repeats every "+knCycle.String()+"); 0 skips it.")

// knPhase is one step of the Knative scene's load script.
type knPhase struct {
	at   time.Duration
	name string
	// rate is the offered load in requests a second, each taking
	// serviceTime. Load that finds the Revision at zero first sends one
	// request through the activator, as the ingress would.
	rate float64
}

// knScript shows a Knative Service's life under tidal within two and a
// half minutes, with config-autoscaler's 6 s stable window and grace
// period and a target of 10 at 70 % (7 in flight per pod).
var knScript = []knPhase{
	{0, "warm-up: 5 requests/s of 1 s each on the Revision's first pod", 5},
	{20 * time.Second, "step: 5 → 40 requests/s: panic within the 3 s panic window, settling at ceil(40 / 7) = 6 pods", 40},
	{50 * time.Second, "drop: 40 → 12 requests/s: 2 pods, at most halving per decision", 12},
	{75 * time.Second, "load removed: zero after a stable window of zeros and the grace period; the ServerlessService goes to Proxy once Knative's activator answers the probe", 0},
	{105 * time.Second, "requests return through the activator: Knative's activator code reports the first over its websocket to tidal's collector, which brings the Revision back", 8},
	{130 * time.Second, "all quiet: to zero again", 0},
}

// knAnnotations go on the Service's Revision template, from there to its
// PodAutoscaler: a 3 s panic window (50 % of the 6 s stable window), so
// the table's observed column (panic-window concurrency) shows the load.
var knAnnotations = map[string]string{"autoscaling.knative.dev/panic-window-percentage": "50"}

// knCycle is the script's length; a longer run starts it over.
const knCycle = 150 * time.Second

// knTarget is the Revision's Deployment as test/system's Observer follows
// targets.
type knTarget struct {
	ns, deployment string
	rate           *system.Dial
}

func (k knTarget) Ref() (string, string) { return k.ns, k.deployment }
func (k knTarget) Load() float64         { return k.rate.Rate(0) }
func (k knTarget) Stop()                 {}

// TestKnativeRun is the Knative scene of `make run`: Knative Serving's
// controller and tidal's services in Knative mode (startScene), a Knative
// Service driven through knScript, and a live table of what tidal decided
// and did, with the ServerlessService's mode and the PodAutoscaler's status
// at every phase.
func TestKnativeRun(t *testing.T) {
	if *runFor <= 0 {
		t.Skip("the Knative scene of `make run KNATIVE=1`; -knative-run-for turns it on")
	}
	// Ctrl-C ends the script; the test's cleanups then stop everything.
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := os.Stdout
	fmt.Fprintln(out, "tidal run, Knative scene: Knative Serving v0.50.0's controller and tidal's collector, decider and actuator in Knative mode")
	s := startScene(t)
	start := s.createService(t, knAnnotations)
	s.waitRevisionReady(t)
	fmt.Fprintf(out, "Knative Service %s/%s created; Revision %s Ready %s later\n", s.ns, s.svcName, s.rev, time.Since(start).Round(100*time.Millisecond))
	printKnHints(out, s)

	target := knTarget{ns: s.ns, deployment: s.rev + "-deployment", rate: s.rate}
	obs, err := s.tidal.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	ctx, cancel := context.WithTimeout(sig, *runFor)
	// The table's follower and the wake-up requests end with ctx, which
	// ends here first even when t fails inside the loop.
	var wg, wake sync.WaitGroup
	defer func() { cancel(); wake.Wait(); wg.Wait() }()
	begin := time.Now()
	var mu sync.Mutex
	current := -1
	wg.Go(func() {
		rows := 0
		obs.Follow(ctx, []system.Target{target}, 2*time.Second, 1200*time.Millisecond, func(_ int, smp system.Sample) {
			mu.Lock()
			defer mu.Unlock()
			if rows%20 == 0 {
				fmt.Fprintln(out, system.TableHeader)
			}
			rows++
			system.WriteRow(out, begin, s.rev, smp)
		}, func(err error) { fmt.Fprintf(out, "  (sample: %v)\n", err) })
	})
	for ctx.Err() == nil {
		if p := knPhaseAt(time.Since(begin)); p != current {
			current = p
			ph := knScript[p]
			mu.Lock()
			fmt.Fprintf(out, "\n== %s\n", ph.name)
			s.printKnative(out)
			mu.Unlock()
			if ph.rate > 0 && s.reps.last().spec == 0 {
				wake.Go(func() {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					s.request(rctx)
				})
			}
			s.rate.Set(ph.rate)
		}
		s.kc.running(t)
		for _, p := range s.tidal.Procs() {
			if !p.Running() {
				t.Fatalf("%s exited:\n%s", p.Name, p.LogTail(30))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	if sig.Err() != nil {
		fmt.Fprintln(out, "\ninterrupted: ending early")
	}
	fmt.Fprintf(out, "\n== end after %s; stopping everything\n", time.Since(begin).Round(time.Second))
	s.printKnative(out)
	mu.Unlock()
}

// knPhaseAt returns the script's phase at elapsed, repeating every knCycle.
func knPhaseAt(elapsed time.Duration) int {
	starts := make([]time.Duration, len(knScript))
	for i, ph := range knScript {
		starts[i] = ph.at
	}
	return system.PhaseAt(elapsed, knCycle, starts)
}

// request sends one request to the revision's public Service through the
// front; the activator holds it until ctx ends.
func (s *scene) request(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.frontIP+"/", nil)
	if err != nil {
		return
	}
	req.Host = s.publicRev
	req.Header.Set(activator.RevisionHeaderNamespace, s.ns)
	req.Header.Set(activator.RevisionHeaderName, s.rev)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
	}
}

// printKnative prints the Knative objects' view: the PodAutoscaler's
// status as tidal wrote it and the ServerlessService's mode.
func (s *scene) printKnative(out io.Writer) {
	ctx := context.Background()
	pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(out, "  PodAutoscaler: %v\n", err)
		return
	}
	desired, actual := int32(-1), int32(-1)
	if pa.Status.DesiredScale != nil {
		desired = *pa.Status.DesiredScale
	}
	if pa.Status.ActualScale != nil {
		actual = *pa.Status.ActualScale
	}
	mode := "-"
	if sks, err := s.nc.NetworkingV1alpha1().ServerlessServices(s.ns).Get(ctx, s.rev, metav1.GetOptions{}); err == nil {
		mode = string(sks.Spec.Mode)
	}
	fmt.Fprintf(out, "  PodAutoscaler %s: Ready %v, desiredScale %d, actualScale %d; ServerlessService %s; tidal's decision: %s\n",
		s.rev, pa.IsReady(), desired, actual, mode, pa.Status.Annotations[decisionAnnotation])
}

// printKnHints says how to look at the scene from another terminal.
func printKnHints(out io.Writer, s *scene) {
	grpcurl := "go tool -modfile=tools/go.mod grpcurl -plaintext"
	ref := fmt.Sprintf(`'{"target":{"namespace":%q,"name":%q}}'`, s.ns, s.rev+"-deployment")
	fmt.Fprintf(out, `
tidal is running: collector %[1]s, decider %[2]s, actuator %[3]s; Knative's activator code
reports to the collector's activator endpoint.
Inspect it from another terminal in this checkout:
  %[4]s -d %[5]s %[2]s tidal.decider.v1.DeciderService/Explain
  %[4]s %[2]s tidal.decider.v1.DeciderService/WatchDecisions
  %[4]s %[1]s tidal.collector.v1.CollectorService/ListTargets
  kubectl --kubeconfig %[6]s -n %[7]s get ksvc,revisions,podautoscalers.autoscaling.internal.knative.dev,serverlessservices,deployments
Ctrl-C ends the run early; everything started is stopped.
`, s.tidal.Collectors[0].GRPCAddr, s.tidal.Decider.GRPCAddr, s.tidal.Actuator.GRPCAddr, grpcurl, ref, s.c.Kubeconfig, s.ns)
}
