package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// Collector bucket Leases in the failover test: short, so a dead replica's
// targets move in seconds.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
)

// owners returns the collectors whose ListTargets has the target, with the
// newest sample time each holds for it.
func owners(ctx context.Context, procs []*system.Proc, ns, name string) map[int]time.Time {
	out := map[int]time.Time{}
	for i, p := range procs {
		if !p.Running() {
			continue
		}
		conn, err := p.Conn()
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		client := collectorv1.NewCollectorServiceClient(conn)
		req := &collectorv1.ListTargetsRequest{Namespace: ns}
		for {
			resp, err := client.ListTargets(cctx, req)
			if err != nil {
				break
			}
			for _, tg := range resp.GetTargets() {
				if tg.GetTarget().GetName() == name {
					out[i] = tg.GetLastSampleTime().AsTime()
				}
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		cancel()
		_ = conn.Close()
	}
	return out
}

// describeCollector says what a collector lists and holds for a target, for
// failure messages.
func describeCollector(p *system.Proc, ns, name string) string {
	conn, err := p.Conn()
	if err != nil {
		return err.Error()
	}
	defer func() { _ = conn.Close() }()
	client := collectorv1.NewCollectorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	list, err := client.ListTargets(ctx, &collectorv1.ListTargetsRequest{Namespace: ns})
	fmt.Fprintf(&b, "ListTargets of %s (first page): %v (err %v); ", ns, list.GetTargets(), err)
	win, err := client.GetWindow(ctx, &collectorv1.GetWindowRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: name}})
	fmt.Fprintf(&b, "GetWindow: %d samples, ready %v, errors %v (err %v)", len(win.GetSamples()), win.GetReadyPods(), win.GetErrors(), err)
	return b.String()
}

// TestFaultCollectorFailover runs two collectors sharing the targets
// through bucket Leases and kills the one measuring the target: the other
// measures it within one lease period, and the loop goes on scaling it.
func TestFaultCollectorFailover(t *testing.T) {
	leaseNS := cluster.Shared(t).Namespace(t)
	s := startSystem(t, system.Options{Collectors: 2, Args: map[string][]string{"collector": {
		"--buckets", "4", "--lease-namespace", leaseNS,
		"--lease-duration", leaseDuration.String(), "--renew-deadline", renewDeadline.String(), "--retry-period", retryPeriod.String(),
	}}})
	load := system.NewDial(lightLoad)
	k, rec := startKPA(t, s, load)
	testkit.Eventually(t, 90*time.Second, "a decision of 1 under light load", func() bool {
		l, _ := rec.last()
		return l.Known && l.Desired == 1 && l.Replicas == 1
	})
	owner := -1
	testkit.Eventually(t, 30*time.Second, "exactly one collector measuring the target", func() bool {
		o := owners(context.Background(), s.Collectors, k.Namespace, k.Name)
		if len(o) != 1 {
			return false
		}
		for i := range o {
			owner = i
		}
		return true
	})
	other := 1 - owner
	s.Collectors[owner].Kill()
	killedAt := time.Now()
	t.Logf("killed %s, which measured %s/%s, at %s", s.Collectors[owner].Name, k.Namespace, k.Name, killedAt.UTC().Format("15:04:05.000"))
	tookOver := testkit.Eventually(t, 4*leaseDuration, fmt.Sprintf("the surviving collector to measure the target after the kill (lease duration %s)", leaseDuration), func() bool {
		last, ok := owners(context.Background(), s.Collectors, k.Namespace, k.Name)[other]
		return ok && last.After(killedAt)
	}, func() string {
		return fmt.Sprintf("%s after the kill, %s measures: %s", time.Since(killedAt).Round(100*time.Millisecond), s.Collectors[other].Name, describeCollector(s.Collectors[other], k.Namespace, k.Name))
	})
	d := tookOver.Sub(killedAt)
	t.Logf("%s measured the target %s after the kill (lease duration %s, retry period %s)", s.Collectors[other].Name, d.Round(100*time.Millisecond), leaseDuration, retryPeriod)
	// A dead holder's Lease runs out at most one lease duration after its
	// last renewal; the next try, the first scrape and the listing follow.
	if limit := leaseDuration + retryPeriod + 2*time.Second; d > limit {
		t.Errorf("takeover took %s; want within one lease period (%s, plus a retry period and a scrape: %s)", d, leaseDuration, limit)
	}
	load.Set(heavyLoad)
	want := podsFor(heavyLoad)
	testkit.Eventually(t, 30*time.Second, "a scale-up measured by the surviving collector", func() bool {
		l, _ := rec.last()
		return l.Desired == want && l.Replicas == want
	})
	rec.stop()
	rec.checkViolations()
	t.Logf("samples:\n%s", rec.table())
}

// TestFaultKafkaOutage makes the broker unreachable while a Function runs:
// the Function keeps its replicas (an error is not a lag of zero, so no
// idle timeout runs), and when the broker returns, lag is measured again,
// the backlog drains and the Function goes idle to zero.
func TestFaultKafkaOutage(t *testing.T) {
	s := startSystem(t, system.Options{Kafka: true})
	ns := s.Cluster.Namespace(t)
	produce := system.NewDial(60)
	idle := lagIdle
	f, err := s.StartFunction(context.Background(), system.FunctionOptions{
		Namespace: ns, Name: "fn", Topic: "in", Partitions: lagPartitions, IdleTimeout: &idle,
		Produce: produce, RatePerPod: lagPerPod, ColdStart: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	rec := record(t, s, f, lagRule)
	testkit.Eventually(t, 60*time.Second, "the Function scaled up and consuming", func() bool {
		l, _ := rec.last()
		return l.Replicas >= 1 && l.Ready == l.Replicas && f.Consumers.Processed() > 100
	})
	rw := watchReplicas(t, s, ns, "fn")
	time.Sleep(2 * tick)

	s.SetKafkaReachable(false)
	downAt := time.Now()
	time.Sleep(3 * lagIdle)
	s.SetKafkaReachable(true)
	upAt := time.Now()
	// A decision made just before the outage may still be applied in its
	// first tick; from then on nothing may change.
	var during []system.Sample
	for _, smp := range rec.since(downAt.Add(tick)) {
		if smp.Time.Before(upAt) {
			during = append(during, smp)
		}
	}
	if len(during) < 4 {
		t.Fatalf("%d samples during the outage; want several", len(during))
	}
	held := during[0].Replicas
	t.Logf("broker unreachable for %s with %d replicas", upAt.Sub(downAt).Round(100*time.Millisecond), held)
	t.Run("keeps its replicas", func(t *testing.T) {
		if held < 1 {
			t.Errorf("%d replicas at the start of the outage; want the Function still running", held)
		}
		for _, smp := range during {
			if smp.Replicas != held {
				t.Errorf("t=%.1fs, broker down: %d replicas; want the %d it had (no scaling on an error)", smp.Time.Sub(rec.start).Seconds(), smp.Replicas, held)
			}
		}
		if values, _ := rw.snapshot(); slices.Contains(values, 0) {
			t.Errorf("replicas went to 0 during or after the outage (history %v)", values)
		}
	})
	t.Run("explains the outage", func(t *testing.T) {
		// Explain should say the lag could not be measured, not merely that
		// nothing new arrived: an operator needs the cause.
		errs := 0
		for _, smp := range during {
			if smp.State() == "error" {
				errs++
			}
		}
		if errs == 0 {
			t.Errorf("none of %d ticks during the outage explained a measurement error (last: %q); want the collector's error in Explain",
				len(during), during[len(during)-1].Lag.GetMeasureError())
		}
	})

	testkit.Eventually(t, 30*time.Second, "lag measured again after the broker returned", func() bool {
		l, _ := rec.last()
		return l.Time.After(upAt) && l.Lag != nil && l.Lag.GetMeasureError() == ""
	})
	produced := f.Producer.Produced()
	testkit.Eventually(t, 90*time.Second, "the backlog consumed after the outage", func() bool { return f.Consumers.Processed() >= produced })
	produce.Set(0)
	testkit.Eventually(t, lagIdle+60*time.Second, "the Function idle at zero after recovering", func() bool {
		l, _ := rec.last()
		return l.Replicas == 0
	})
	rec.stop()
	rec.checkViolations()
	t.Logf("samples:\n%s", rec.table())
}

// restartAPIServer kills the cluster's kube-apiserver and starts it again
// with the same command line, as a crash and a restart by its supervisor
// would. It returns a function that stops the new process.
func restartAPIServer(t *testing.T, c *cluster.Cluster) (stop func()) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "kube-apiserver.pid"))
	if err != nil {
		t.Fatalf("kube-apiserver pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("kube-apiserver command line: %v", err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	testkit.Eventually(t, 10*time.Second, "the old kube-apiserver gone", func() bool { return syscall.Kill(pid, 0) != nil })

	logFile, err := os.Create(filepath.Join(c.Dir, "kube-apiserver-restarted.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(exited) }()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	testkit.Eventually(t, 60*time.Second, "the restarted kube-apiserver ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil
	})
	return stop
}

// TestFaultAPIServerRestart restarts the kube-apiserver of a private
// cluster under a running loop: every service reconnects on its own, and a
// load step afterwards is measured (collector), decided (decider) and
// applied (actuator).
func TestFaultAPIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs its own Kubernetes control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Log: testWriter{t}})
	if err != nil {
		t.Fatalf("private cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	// The restarted API server stops after everything that uses it and
	// before the rest of the control plane.
	var stopAPI func()
	t.Cleanup(func() {
		if stopAPI != nil {
			stopAPI()
		}
	})
	s := startSystem(t, system.Options{Cluster: c})
	load := system.NewDial(lightLoad)
	_, rec := startKPA(t, s, load)
	testkit.Eventually(t, 90*time.Second, "a decision of 1 under light load", func() bool {
		l, _ := rec.last()
		return l.Known && l.Desired == 1 && l.Replicas == 1
	})
	rec.paused.Store(true) // the Deployment cannot be read while the API server is down
	stopAPI = restartAPIServer(t, c)
	t.Logf("kube-apiserver restarted at t=%.1fs", time.Since(rec.start).Seconds())
	rec.paused.Store(false)
	for _, p := range s.Procs() {
		if !p.Running() {
			t.Fatalf("%s exited when the API server restarted:\n%s", p.Name, p.LogTail(30))
		}
	}
	load.Set(heavyLoad)
	want := podsFor(heavyLoad)
	testkit.Eventually(t, 60*time.Second, "a scale-up after the restart, with the new pods measured", func() bool {
		l, _ := rec.last()
		return l.Desired == want && l.Replicas == want && l.KPA.GetReadyPods() == want
	})
	rec.stop()
	rec.checkViolations()
	t.Logf("samples:\n%s", rec.table())
}
