package chart_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidalscale/tidal/apis/knative/knativetest"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/shard/route"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// knativeRelease runs the chart's three services in Knative mode as local
// processes, each configured as the chart configures its pods (their TIDAL_*
// environment as flags, its ConfigMaps as files, the collector and the
// actuator each under its own ServiceAccount's token). Its cleanup stops
// them and fails the test on any API server refusal in their logs.
type knativeRelease struct {
	c        *cluster.Cluster
	acc      *rel.Accounts
	objs     manifest
	full     string
	dirs     map[string]string
	bin      string
	logDir   string
	kns, wns string // Knative's namespace and the workloads'

	mu    sync.Mutex
	procs []*system.Proc
}

func startKnativeRelease(ctx context.Context, t *testing.T, set ...string) *knativeRelease {
	t.Helper()
	c := cluster.Shared(t)
	if err := knativetest.InstallCRDs(ctx, c); err != nil {
		t.Fatal(err)
	}
	r := &knativeRelease{c: c, kns: c.Namespace(t), wns: c.Namespace(t), bin: systemBinaries(t), logDir: t.TempDir()}
	r.acc = rel.ForTest(t, c, append([]string{"knative.enabled=true", "knative.namespace=" + r.kns, "tls.mode=disabled"}, set...)...)
	r.objs = manifest(r.acc.Objects)
	r.full = r.acc.Release.Fullname()
	dirs, err := rel.ConfigDirs(t.TempDir(), r.acc.Objects, r.full)
	if err != nil {
		t.Fatal(err)
	}
	r.dirs = dirs
	t.Cleanup(func() {
		for name, text := range readLogs(t, r.logDir) {
			for _, line := range strings.Split(text, "\n") {
				if refusedLine(line) && !otherTests(line, r.wns, r.kns) {
					t.Errorf("%s was refused by the API server: %s", name, line)
					break
				}
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := len(r.procs) - 1; i >= 0; i-- {
			p := r.procs[i]
			if t.Failed() {
				testkit.KeepLog(t, p.Name, p.LogTail(1<<20))
			}
			if !p.Running() {
				continue
			}
			if err := p.Stop(20 * time.Second); err != nil {
				t.Errorf("stop %s: %v", p.Name, err)
			}
		}
	})
	return r
}

// args are component comp's flags as the chart sets them, but for the
// variables in drop, with its account's kubeconfig where it has one.
func (r *knativeRelease) args(t *testing.T, comp string, drop ...string) []string {
	t.Helper()
	args := rel.ChartArgs(typed[appsv1.Deployment](t, r.objs.get(t, "Deployment", r.full+"-"+comp)), r.dirs, drop...)
	if a := r.acc.ByComponent[comp]; a != nil && comp != "decider" {
		p := filepath.Join(t.TempDir(), comp+".kubeconfig")
		if err := a.WriteKubeconfig(p); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--kubeconfig="+p)
	}
	return args
}

// start runs service svc as name, serving gRPC on grpcAddr ("" for a free
// loopback port).
func (r *knativeRelease) start(ctx context.Context, t *testing.T, name, svc, grpcAddr string, args ...string) *system.Proc {
	t.Helper()
	var p *system.Proc
	var err error
	if grpcAddr == "" {
		p, err = system.NewProc(name, r.bin, svc, r.logDir, args...)
	} else {
		p, err = system.NewProcOn(grpcAddr, name, r.bin, svc, r.logDir, args...)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	if err := p.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	return p
}

// Leases short enough that three failovers fit in a test: a dead replica's
// buckets are free replicaLease after its last renewal.
const (
	replicaLease   = 6 * time.Second
	replicaRenew   = 4 * time.Second
	replicaRetry   = time.Second
	replicaTick    = 2 * time.Second // the chart's decider.tickInterval
	replicaTargets = 4
)

// TestKnativeReplicasSurviveKills runs two collectors, two deciders and two
// actuators in Knative mode as the chart runs them (bucket Leases, the
// collectors finding the deciders through the decider Service's ready pods,
// the deciders reaching the actuators through one Service address), with two
// of Knative's activators each connected to one collector and each
// reporting half of every revision's requests, so that every revision's
// stats reach both collectors and one of them forwards its half to the
// owner. Under that load it kills one collector, then one decider, then one
// actuator (SIGKILL), raising the load right after each, and checks that:
//   - every revision reaches each new scale, with the stats of both
//     activators and no more (a half lost or counted twice would settle at
//     another count);
//   - no revision is decided by two deciders at once (the stream of
//     decisions of each moves from one decider to the other at most once,
//     when its decider dies);
//   - no revision is left undecided longer than a lease period: after each
//     kill every revision reaches its new scale within the time a step
//     takes with every replica up, plus a lease period, a retry period and
//     three ticks.
//
// What a cluster does and no process here does is played by the test: the
// pods behind the decider Service are pods kwok runs, and a decider serves
// on its pod's IP; when the test kills a decider it deletes its pod, as the
// kubelet's failed readiness probe or a node's loss takes it out of the
// Service; a TCP proxy stands for the actuator Service's ClusterIP
// (kube-proxy), and the killed actuator leaves it as its endpoint would.
func TestKnativeReplicasSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six services and kills three")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := startKnativeRelease(ctx, t)
	c, wns := r.c, r.wns
	relNS := r.acc.Release.Namespace
	leases := []string{"--lease-duration=" + replicaLease.String(), "--renew-deadline=" + replicaRenew.String(), "--retry-period=" + replicaRetry.String()}

	// The actuators, behind one address.
	actSvc := newServiceProxy(t)
	var actuators []*system.Proc
	for i := range 2 {
		a := r.start(ctx, t, fmt.Sprintf("actuator-%d", i), "actuator", "", append(r.args(t, "actuator"), leases...)...)
		actSvc.add(a.GRPCAddr)
		actuators = append(actuators, a)
	}

	// The deciders, each on the IP kwok gave its pod, on the port the
	// collectors' --decider-service names.
	svcFlag := flagValue(t, r.args(t, "collector"), "--decider-service")
	nsName, portStr, _ := strings.Cut(svcFlag, ":")
	if ns, name, _ := strings.Cut(nsName, "/"); ns != relNS || name == "" || portStr == "" || mustAtoi(t, portStr) == 0 {
		t.Fatalf("--decider-service=%s: want %s/NAME:PORT", svcFlag, relNS)
	}
	// The chart's decider Service, installed with the release: the deciders'
	// pods are what its selector selects.
	svc, err := c.Client.CoreV1().Services(relNS).Get(ctx, strings.TrimPrefix(nsName, relNS+"/"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := svc.Spec.Selector
	// The release's decider Deployment runs no process here (kwok's pods
	// serve nothing): it goes to zero, and the test's pods take its place.
	if _, err := c.Client.AppsV1().Deployments(relNS).Patch(ctx, r.full+"-decider", types.MergePatchType,
		[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the release's decider pods gone", func() bool {
		pods, err := c.Client.CoreV1().Pods(relNS).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
		return err == nil && len(pods.Items) == 0
	})
	var deciders []*system.Proc
	for i := range 2 {
		name := fmt.Sprintf("decider-%d", i)
		ip := runPod(ctx, t, c, relNS, name, selector)
		deciders = append(deciders, r.start(ctx, t, name, "decider", net.JoinHostPort(ip, portStr),
			append(r.args(t, "decider", "TIDAL_ACTUATOR_ADDR"), "--actuator-addr="+actSvc.addr)...))
	}

	// The collectors, each with its activator endpoint on a port of its own.
	var collectors []*system.Proc
	var wsAddrs []string
	for i := range 2 {
		ws := testkit.FreeAddr(t)
		collectors = append(collectors, r.start(ctx, t, fmt.Sprintf("collector-%d", i), "collector", "",
			append(r.args(t, "collector", "TIDAL_ACTIVATOR_LISTEN"), append(leases, "--activator-listen="+ws)...)...))
		wsAddrs = append(wsAddrs, ws)
	}

	// Revisions kept behind the activator (target-burst-capacity -1, so no
	// pod is scraped and the activators' stats are the whole load), with a
	// 6 s stable window so that a step shows within a few ticks.
	revisions := make([]string, replicaTargets)
	for i := range revisions {
		revisions[i] = fmt.Sprintf("rev-%d", i)
		knativetest.Revision(ctx, t, c, wns, revisions[i], revisions[i]+"-deployment", map[string]string{
			"autoscaling.knative.dev/target":                "10",
			"autoscaling.knative.dev/target-burst-capacity": "-1",
			"autoscaling.knative.dev/window":                "6s",
		})
	}

	decs := watchDecisions(ctx, t, deciders, wns)
	load := &activatorLoad{wns: wns, revisions: revisions}
	for i := range 2 {
		load.run(ctx, t, fmt.Sprintf("activator-%d", i), wsAddrs, i)
	}
	defer load.stop()

	// A level of n pods is a concurrency of (n - 1/2) × 7 (the target of 10
	// at Knative's 70 % utilisation): each level sits half a pod away from
	// the counts next to it, so a lost or doubled half would show.
	reach := func(what string, n int, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		load.set((float64(n) - 0.5) * 7)
		testkit.Eventually(t, within, fmt.Sprintf("every revision at %d pods (%s)", n, what), func() bool {
			for _, rev := range revisions {
				d, err := c.Client.AppsV1().Deployments(wns).Get(ctx, rev+"-deployment", metav1.GetOptions{})
				if err != nil || d.Spec.Replicas == nil || int(*d.Spec.Replicas) != n {
					return false
				}
			}
			return true
		})
		took := time.Since(start)
		t.Logf("%s: every revision at %d pods %s after the load changed", what, n, took.Round(100*time.Millisecond))
		return took
	}
	// A step goes through a stable window of samples, ticks and the scale
	// write. The first two steps, with every replica up, are the baseline.
	reach("steady", 3, 90*time.Second)
	baseline := reach("all replicas up", 4, time.Minute)
	// A kill may add a lease period (the dead holder's buckets run out), a
	// retry period to take them, and ticks to replay, wait out the decider's
	// lateness and decide.
	limit := baseline + replicaLease + replicaRetry + 3*replicaTick

	// Each kill takes the replica that holds most of the revisions, so that
	// every kill moves some.
	kill := func(kind string, procs []*system.Proc, holds func(p *system.Proc, rev string) bool) int {
		t.Helper()
		best, most := -1, 0
		for i, p := range procs {
			n := 0
			for _, rev := range revisions {
				if holds(p, rev) {
					n++
				}
			}
			if n > most {
				best, most = i, n
			}
		}
		if best < 0 {
			t.Fatalf("no %s holds any revision", kind)
		}
		procs[best].Kill()
		t.Logf("killed %s, which held %d of the %d revisions", procs[best].Name, most, len(revisions))
		return best
	}
	checkFrom := time.Now()
	var decKilled time.Time
	var deadDecider int
	steps := []struct {
		what string
		kill func()
	}{
		{"a collector killed", func() {
			kill("collector", collectors, func(p *system.Proc, rev string) bool { return measures(ctx, p, wns, rev+"-deployment") })
		}},
		{"a decider killed", func() {
			latest := decs.latest()
			deadDecider = kill("decider", deciders, func(p *system.Proc, rev string) bool {
				d, ok := latest[wns+"/"+rev+"-deployment"]
				return ok && deciders[d.decider] == p
			})
			decKilled = time.Now()
			if err := c.Client.CoreV1().Pods(relNS).Delete(ctx, fmt.Sprintf("decider-%d", deadDecider), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}},
		{"an actuator killed", func() {
			prefix := flagValue(t, r.args(t, "actuator"), "--lease-prefix")
			buckets := mustAtoi(t, flagValue(t, r.args(t, "actuator"), "--buckets"))
			i := kill("actuator", actuators, func(p *system.Proc, rev string) bool {
				// The bucket Lease of the PodAutoscaler's key names its owner.
				name := fmt.Sprintf("%s-%d-of-%d", prefix, route.Bucket(wns+"/"+rev, buckets), buckets)
				l, err := c.Client.CoordinationV1().Leases(relNS).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("Lease %s: %v", name, err)
				}
				return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == p.GRPCAddr
			})
			actSvc.remove(actuators[i].GRPCAddr)
		}},
	}
	for i, st := range steps {
		st.kill()
		if took := reach(st.what, 5+2*i, 2*time.Minute); took > limit {
			t.Errorf("%s: the revisions took %s to reach the new scale; want at most %s (%s without a kill, a lease period, a retry period and three ticks)",
				st.what, took.Round(100*time.Millisecond), limit, baseline.Round(100*time.Millisecond))
		}
	}

	// Every revision's decisions, in the order the watches received them:
	// one decider at a time, and a move only from the killed one.
	byRev := decs.since(checkFrom)
	for _, rev := range revisions {
		// A Knative PodAutoscaler's target is its scale target.
		ds := byRev[wns+"/"+rev+"-deployment"]
		if len(ds) == 0 {
			t.Errorf("%s: no decision since the first kill; decisions of %v", rev, slices.Sorted(maps.Keys(byRev)))
			continue
		}
		moves := 0
		for i := 1; i < len(ds); i++ {
			if ds[i].decider == ds[i-1].decider {
				continue
			}
			moves++
			if ds[i-1].decider != deadDecider || moves > 1 || ds[i].at.Before(decKilled) {
				t.Errorf("%s: decided by %s (received %s) after %s (received %s); want one move, from the killed %s after its kill (%s)",
					rev, deciders[ds[i].decider].Name, ds[i].at.Format("15:04:05.000"), deciders[ds[i-1].decider].Name, ds[i-1].at.Format("15:04:05.000"),
					deciders[deadDecider].Name, decKilled.Format("15:04:05.000"))
			}
		}
		t.Logf("%s: %d decisions since the first kill, by %s first, %d move(s)", rev, len(ds), deciders[ds[0].decider].Name, moves)
	}
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %v", flag, args)
	return ""
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// measures reports whether collector p lists the target among those it
// measures.
func measures(ctx context.Context, p *system.Proc, ns, name string) bool {
	conn, err := p.Conn()
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := collectorv1.NewCollectorServiceClient(conn).ListTargets(ctx, &collectorv1.ListTargetsRequest{Namespace: ns})
	return err == nil && slices.ContainsFunc(resp.GetTargets(), func(tg *collectorv1.TargetSummary) bool { return tg.GetTarget().GetName() == name })
}

// runPod creates a pod with labels, waits until kwok runs it Ready and
// returns its IP: a loopback address a process of the test can serve on.
func runPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, labels map[string]string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "tidal-decider"}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	testkit.Eventually(t, time.Minute, "pod "+name+" Ready with an IP", func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ip = p.Status.PodIP
				return true
			}
		}
		return false
	})
	return ip
}

// serviceProxy is a Service's ClusterIP as kube-proxy makes it: each new
// connection goes to one of the live endpoints, in turn.
type serviceProxy struct {
	addr string
	ln   net.Listener

	mu       sync.Mutex
	backends []string
	next     int
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newServiceProxy(t *testing.T) *serviceProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &serviceProxy{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *serviceProxy) add(backend string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = append(p.backends, backend)
}

func (p *serviceProxy) remove(backend string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = slices.DeleteFunc(p.backends, func(b string) bool { return b == backend })
}

func (p *serviceProxy) pick() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.backends) == 0 {
		return "", false
	}
	p.next++
	return p.backends[p.next%len(p.backends)], true
}

// track records c so the cleanup can close it; false once the listener
// is closed.
func (p *serviceProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *serviceProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.track(in, true)
			defer p.track(in, false)
			defer func() { _ = in.Close() }()
			backend, ok := p.pick()
			if !ok {
				return
			}
			out, err := net.DialTimeout("tcp", backend, 2*time.Second)
			if err != nil {
				return
			}
			p.track(out, true)
			defer p.track(out, false)
			defer func() { _ = out.Close() }()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(out, in)
				_ = out.Close()
				close(done)
			}()
			_, _ = io.Copy(in, out)
			_ = in.Close()
			<-done
		}()
	}
}

// activatorLoad plays Knative's activators: each keeps one websocket to a
// collector (the autoscaler Service's choice; the next one when its
// collector dies) and reports, once a second, its half of every
// revision's concurrency.
type activatorLoad struct {
	wns       string
	revisions []string

	mu          sync.Mutex
	concurrency float64

	cancels []context.CancelFunc
	wg      sync.WaitGroup
}

func (l *activatorLoad) set(c float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.concurrency = c
}

func (l *activatorLoad) half() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.concurrency / 2
}

func (l *activatorLoad) run(ctx context.Context, t *testing.T, pod string, collectors []string, first int) {
	ctx, cancel := context.WithCancel(ctx)
	l.cancels = append(l.cancels, cancel)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var conn *websocket.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close()
			}
		}()
		next := first
		for {
			if conn == nil {
				addr := collectors[next%len(collectors)]
				c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+addr+"/", nil)
				if resp != nil && resp.Body != nil {
					_ = resp.Body.Close()
				}
				if err != nil {
					next++
				} else {
					conn = c
					t.Logf("%s reports to %s", pod, addr)
				}
			}
			if conn != nil {
				h := l.half()
				for _, rev := range l.revisions {
					if err := conn.WriteMessage(websocket.BinaryMessage, wireFrame(l.wns, rev, pod, h, h)); err != nil {
						_ = conn.Close()
						conn = nil
						next++
						break
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (l *activatorLoad) stop() {
	for _, c := range l.cancels {
		c()
	}
	l.wg.Wait()
}

// decision is one decision a WatchDecisions stream delivered.
type decision struct {
	at      time.Time
	decider int
	desired int32
}

// decisionLog keeps every decision the deciders stream, by target key.
type decisionLog struct {
	mu    sync.Mutex
	byKey map[string][]decision
}

// since returns each target's decisions made at or after from, in order.
func (d *decisionLog) since(from time.Time) map[string][]decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]decision{}
	for k, ds := range d.byKey {
		for _, x := range ds {
			if !x.at.Before(from) {
				out[k] = append(out[k], x)
			}
		}
		slices.SortFunc(out[k], func(a, b decision) int { return a.at.Compare(b.at) })
	}
	return out
}

// latest returns each target's last decision received.
func (d *decisionLog) latest() map[string]decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]decision{}
	for k, ds := range d.byKey {
		if len(ds) > 0 {
			out[k] = ds[len(ds)-1]
		}
	}
	return out
}

// watchDecisions follows every decider's WatchDecisions of ns until the
// test ends, reconnecting while the decider runs.
func watchDecisions(ctx context.Context, t *testing.T, deciders []*system.Proc, ns string) *decisionLog {
	t.Helper()
	log := &decisionLog{byKey: map[string][]decision{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, p := range deciders {
		conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		client := deciderv1.NewDeciderServiceClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = conn.Close() }()
			for ctx.Err() == nil && p.Running() {
				stream, err := client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: ns})
				for err == nil {
					var resp *deciderv1.WatchDecisionsResponse
					if resp, err = stream.Recv(); err == nil {
						d := resp.GetDecision()
						// When it was received: a decider that takes a target
						// over may decide a tick the dead one decided too,
						// but only after it took it.
						x := decision{at: time.Now(), decider: i, desired: d.GetDesiredReplicas()}
						log.mu.Lock()
						log.byKey[d.GetTarget().Key()] = append(log.byKey[d.GetTarget().Key()], x)
						log.mu.Unlock()
					}
				}
				if errors.Is(ctx.Err(), context.Canceled) {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	return log
}

// subjectNS finds the namespace of the object a service's log line is about.
var subjectNS = regexp.MustCompile(`"(?:target|knative-podautoscaler|podautoscaler)":"([^"/]+)/`)

// otherTests reports whether a log line is about an object in a namespace
// other than own: the release's services watch every namespace of the shared
// test cluster, where other tests' objects may name what this release's
// accounts may not read (a Secret of theirs), and a refusal there is least
// privilege doing its job.
func otherTests(line string, own ...string) bool {
	m := subjectNS.FindStringSubmatch(line)
	return m != nil && !slices.Contains(own, m[1])
}
