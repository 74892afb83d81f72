package scale

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/decider/kpa"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
)

// Env is where a run happens.
type Env struct {
	// Cluster is the control plane; Namespace, which must exist, holds every
	// target.
	Cluster   *cluster.Cluster
	Namespace string
	// BinDir holds the services' binaries (system.Build).
	BinDir string
	// LogDir keeps the services' logs; empty means a temporary directory,
	// removed at the end.
	LogDir string
	// ProfileDir, if set, receives a CPU profile of each service over the
	// steady phase, <process>.cpu.pprof, and its heap at the end of it,
	// <process>.heap.pprof, for `go tool pprof`.
	ProfileDir string
	// Log receives progress lines.
	Log io.Writer
}

// kpaTarget is one KPA target's plan: its two load levels, as the replicas
// each implies, and whether and when in the period it switches.
type kpaTarget struct {
	name      string
	low, high int32
	switching bool
	offset    time.Duration
}

// perPodTarget is the concurrency one pod is sized for under Knative's
// defaults, which the run does not change: container-concurrency-target-
// default × its utilisation fraction (100 × 70 % = 70).
func perPodTarget() float64 {
	d := kpaconfig.Default()
	return d.ContainerConcurrencyTargetDefault * d.ContainerConcurrencyTargetFraction
}

// concurrency is the total concurrency of a level implying n replicas:
// (n − ½) targets' worth, so ceil(concurrency / target) = n with half a pod
// of margin either way.
func concurrency(n int32) float64 { return (float64(n) - 0.5) * perPodTarget() }

// plan picks every KPA target's levels: low in [MinPods, MaxPods), high in
// (low, MaxPods]; the switching ones are spread evenly over the targets and
// over the period.
func plan(cfg Config) []kpaTarget {
	r := rand.New(rand.NewPCG(cfg.Seed, 0))
	n := cfg.KPATargets
	nSwitch := int(float64(n)*cfg.SwitchFraction + 0.5)
	out := make([]kpaTarget, n)
	for i := range out {
		low := int32(cfg.MinPods + r.IntN(cfg.MaxPods-cfg.MinPods))
		high := low + 1 + int32(r.IntN(cfg.MaxPods-int(low)))
		out[i] = kpaTarget{name: fmt.Sprintf("kpa-%05d", i), low: low, high: high}
	}
	for j := range nSwitch {
		i := j * n / nSwitch
		out[i].switching = true
		out[i].offset = time.Duration(j) * cfg.SwitchPeriod / time.Duration(nSwitch)
	}
	return out
}

// Run runs cfg in env and reports. It stops everything it started.
func Run(ctx context.Context, cfg Config, env Env) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Log == nil {
		env.Log = io.Discard
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(env.Log, "%s scale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	targets := plan(cfg)
	// Every simulated pod takes a listener and a connection from each
	// collector; the collectors inherit the limit. Where the limit cannot
	// be raised that far (no CAP_SYS_RESOURCE: 20,000 here, about 9,900
	// pods), the pod farm answers every pod on one listener instead.
	need := uint64(cfg.KPATargets*cfg.MaxPods*(2+cfg.Replicas) + 4096)
	oneListener := raiseFileLimit(need) < need

	rc := env.Cluster.Config()
	rc.QPS, rc.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	crds, err := tidalclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	autoscaler := map[string]string{
		kpaconfig.KeyStableWindow:          cfg.StableWindow.String(),
		kpaconfig.KeyPanicWindowPercentage: "50",
	}
	svcs, err := startServices(ctx, env.BinDir, env.Cluster, env.Namespace, cfg.Replicas, cfg.MemoryLimit, autoscaler, env.LogDir, env.Log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := svcs.Stop(); err != nil {
			logf("stopping the services: %v", err)
		}
	}()
	procs, err := newProcWatch(svcs, env.Cluster.Dir)
	if err != nil {
		return nil, err
	}

	var deciders []decider
	var collectors []collector
	for _, p := range svcs.Procs {
		if p.Service != "decider" && p.Service != "collector" {
			continue
		}
		conn, err := p.Conn()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		defer func() { _ = conn.Close() }()
		if p.Service == "decider" {
			deciders = append(deciders, decider{name: p.Name, client: deciderv1.NewDeciderServiceClient(conn)})
		} else {
			collectors = append(collectors, collector{name: p.Name, client: collectorv1.NewCollectorServiceClient(conn)})
		}
	}
	// The readers run from the start, as a dashboard would, and tell when
	// each decision was made.
	rdr := newReaders()
	stopReaders := rdr.run(ctx, deciders, env.Namespace, kpa.TickInterval)
	defer stopReaders()

	farm := newPodFarm(oneListener)
	stopFarm, err := farm.Run(ctx, client, env.Namespace)
	if err != nil {
		return nil, err
	}
	defer stopFarm()
	rec := newRecorder()
	stopRec, err := rec.run(ctx, client, crds, env.Namespace)
	if err != nil {
		return nil, err
	}
	defer stopRec()

	rep := &Report{Config: cfg}
	// Creation.
	logf("creating %d KPA and %d lag targets", cfg.KPATargets, cfg.LagTargets)
	createStart := time.Now()
	if err := createTargets(ctx, cfg, env.Namespace, client, crds, svcs.Brokers, targets, rec, farm); err != nil {
		return nil, err
	}
	rep.Creation = time.Since(createStart)
	logf("created in %s", rep.Creation.Round(100*time.Millisecond))

	// First decisions, and the pods they imply up: a steady phase that
	// overlaps the pods' creation measures a control plane still creating
	// them and a collector still catching up, not the load intended.
	settleEnd := time.Now().Add(cfg.Settle)
	for last := time.Now(); ; {
		kpa, lag := rec.undecided()
		pods, implied := farm.Pods(), rec.implied()
		if kpa == 0 && lag == 0 && float64(pods) >= settledPods*float64(implied) {
			break
		}
		if time.Now().After(settleEnd) {
			logf("settle time %s over: %d KPA targets without a decision, %d lag targets not scaled, %d of %d implied pods served; going on", cfg.Settle, kpa, lag, pods, implied)
			break
		}
		if time.Since(last) >= 10*time.Second {
			last = time.Now()
			n, _ := farm.Err()
			logf("waiting for first decisions and pods: %d KPA targets without a decision, %d lag targets not scaled, %d of %d implied pods served (listen errors %d)", kpa, lag, pods, implied, n)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	rep.firstDecisions(rec, createStart)
	logf("first decisions: %s", rep.FirstDecisionLine())

	// Steady phase: load switches, costs are measured.
	steadyStart := time.Now()
	steadyEnd := steadyStart.Add(cfg.Duration)
	logf("steady phase for %s: %d targets switch load every %s", cfg.Duration, countSwitching(targets), cfg.SwitchPeriod)
	if err := procs.begin(ctx, client); err != nil {
		return nil, err
	}
	var polled []string
	steadyPolled := 0
	for _, t := range targets {
		switch {
		case t.switching:
			polled = append(polled, t.name)
		case steadyPolled < maxSteadyPolled:
			// Some targets whose load never changes, whose samples tell
			// why such a target moves.
			polled = append(polled, t.name)
			steadyPolled++
		}
	}
	poller := newSamplePoller()
	stopPoller := poller.run(ctx, collectors, env.Namespace, polled)
	defer stopPoller()
	var wg sync.WaitGroup
	runCtx, cancel := context.WithDeadline(ctx, steadyEnd)
	defer cancel()
	wg.Go(func() { switchLoads(runCtx, cfg, targets, steadyStart, steadyEnd, rec, farm) })
	wg.Go(func() { procs.sample(runCtx, 5*time.Second, logf, rec, farm) })
	if env.ProfileDir != "" {
		wg.Go(func() { profileServices(ctx, svcs, client, env.ProfileDir, cfg.Duration, logf) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := procs.end(ctx, client); err != nil {
		return nil, err
	}
	stopPoller()
	stopReaders()
	rep.Steady = time.Since(steadyStart)
	rep.Pods = farm.Pods()
	rep.ImpliedPods = rec.implied()
	rep.ListenErrors, rep.ListenError = farm.Err()
	results := rec.results(steadyEnd)
	rep.changes(results)
	in := splitInput{changes: results, live: rdr.decisions, start: steadyStart, end: steadyEnd}
	if in.strategy, err = replayStrategy(autoscaler, env.Namespace, poller.samples); err != nil {
		rep.ReplayError = err.Error()
	}
	rep.Windows = WindowReads{Reads: poller.polls, Longest: poller.longest, Gaps: poller.gaps, Missed: poller.missed}
	if poller.firstErr != nil {
		rep.ReplayError = fmt.Sprintf("%d of %d window reads failed, first: %v", poller.errs, poller.errs+poller.polls, poller.firstErr)
	}
	if env.Cluster.AuditLog != "" {
		if in.writes, err = readAudit(env.Cluster.AuditLog); err != nil {
			rep.Writes.Error = err.Error()
		}
	} else {
		rep.Writes.Error = "the cluster keeps no audit log"
	}
	rep.Split = in.split()
	rep.firstSamples(rec, rdr, farm)
	rep.readers(rdr)
	// A target that did not change load has converged once a switch
	// period of the steady phase has passed at its level.
	converged := steadyStart.Add(cfg.SwitchPeriod)
	unchanged, quiet := rep.unchanged(rec, converged, steadyEnd)
	rep.Unchanged.Sampling = sampling(rec, poller.samples, unchanged, converged, steadyEnd)
	rep.Unchanged.Sampling.RoundsLost, rep.Unchanged.Sampling.Skipped = collectorLosses(ctx, svcs)
	if rep.Writes.Error == "" {
		rep.Writes = in.writeRates(rec.applied(steadyStart, steadyEnd))
		rep.Unchanged.ActuatorWrites, rep.Unchanged.ActuatorKinds = in.writesOn(unchanged, converged, steadyEnd)
		rep.Unchanged.QuietWrites, _ = in.writesOn(quiet, converged, steadyEnd)
	}
	rep.decisionAges(rec, steadyEnd.Add(-30*time.Second), steadyEnd)
	rep.Procs = procs.report(svcs)
	var reqErr error
	if rep.Requests, rep.RequestsByResource, reqErr = procs.requests(); reqErr != nil {
		rep.RequestsError = reqErr.Error()
	}
	rep.OtherCPU, rep.LoadAverage = procs.others(), procs.load0+" at the start, "+procs.load1+" at the end"
	return rep, nil
}

func countSwitching(ts []kpaTarget) int {
	n := 0
	for _, t := range ts {
		if t.switching {
			n++
		}
	}
	return n
}

// raiseFileLimit raises this process's open-file limit (hard too, where
// allowed) to at least n, so the processes it starts inherit it, and
// returns the limit it has.
func raiseFileLimit(n uint64) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= n {
		return l.Cur
	}
	want := syscall.Rlimit{Cur: n, Max: max(l.Max, n)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
		want = syscall.Rlimit{Cur: l.Max, Max: l.Max}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
			return l.Cur
		}
	}
	return want.Cur
}

// createTargets creates the lag targets' topics in one request, then every
// target with CreateWorkers in parallel, then produces a backlog of
// records to every lag target's topic.
func createTargets(ctx context.Context, cfg Config, ns string, client kubernetes.Interface, crds tidalclient.Interface,
	brokers []string, targets []kpaTarget, rec *recorder, farm *podFarm) error {
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer kc.Close()
	var topics []string
	for i := range cfg.LagTargets {
		topics = append(topics, fmt.Sprintf("lag-%05d", i))
	}
	if len(topics) > 0 {
		resps, err := kadm.NewClient(kc).CreateTopics(ctx, lagPartitions, 1, nil, topics...)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			return fmt.Errorf("create topics: %w", err)
		}
	}

	jobs := make(chan func(context.Context) error)
	errc := make(chan error, cfg.CreateWorkers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range cfg.CreateWorkers {
		wg.Go(func() {
			for job := range jobs {
				if ctx.Err() != nil {
					continue // drain: another worker failed
				}
				if err := job(ctx); err != nil {
					errc <- err
					cancel()
				}
			}
		})
	}
	send := func(job func(context.Context) error) bool {
		select {
		case jobs <- job:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// Interleave the two kinds, as targets would arrive in a real cluster.
	for i := 0; i < len(targets) || i < len(topics); i++ {
		if i < len(targets) {
			t := targets[i]
			if !send(func(ctx context.Context) error { return createKPA(ctx, ns, client, crds, t, rec, farm) }) {
				break
			}
		}
		if i < len(topics) {
			name := topics[i]
			if !send(func(ctx context.Context) error { return createLag(ctx, ns, crds, name, rec) }) {
				break
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	if len(topics) == 0 {
		return nil
	}
	// A backlog in every topic, and no consumer: the collector measures the
	// lag, the decider scales each Function up to its partitions.
	var recs []*kgo.Record
	for _, t := range topics {
		for p := range lagPartitions {
			for range lagBacklog {
				recs = append(recs, &kgo.Record{Topic: t, Partition: int32(p), Value: []byte("x")})
			}
		}
	}
	if err := kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce backlog: %w", err)
	}
	return nil
}

// lagPartitions and lagBacklog shape every lag target: a topic of two
// partitions holding 50 records each.
const (
	lagPartitions = 2
	lagBacklog    = 50
)

func createKPA(ctx context.Context, ns string, client kubernetes.Interface, crds tidalclient.Interface, t kpaTarget, rec *recorder, farm *podFarm) error {
	rec.addKPA(t.name, time.Now(), t.low, t.switching)
	farm.SetLoad(t.name, concurrency(t.low))
	labels := map[string]string{"app": t.name, kpaLabel: t.name}
	d := cluster.Deployment(t.name, labels, t.low)
	// Bound to kwok's node from the start: the scheduler's bind is one
	// write per pod less for a control plane that brings up thousands.
	d.Spec.Template.Spec.NodeName = cluster.NodeName
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kpa target %s: %w", t.name, err)
	}
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: ns},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: t.name},
			Strategy:       autoscalingv1alpha1.StrategyKPA,
		},
	}
	if _, err := crds.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kpa target %s: podautoscaler: %w", t.name, err)
	}
	return nil
}

func createLag(ctx context.Context, ns string, crds tidalclient.Interface, name string, rec *recorder) error {
	rec.addLag(name, time.Now())
	parts := int32(lagPartitions)
	topic := &functionsv1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       functionsv1alpha1.TopicSpec{Partitions: &parts},
	}
	if _, err := crds.FunctionsV1alpha1().Topics(ns).Create(ctx, topic, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lag target %s: topic: %w", name, err)
	}
	fn := &functionsv1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: functionsv1alpha1.FunctionSpec{
			Container: corev1.Container{Name: "main", Image: "tidal.test/fn:latest"},
			Input:     name,
		},
	}
	if _, err := crds.FunctionsV1alpha1().Functions(ns).Create(ctx, fn, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lag target %s: %w", name, err)
	}
	return nil
}

// switchLoads flips every switching target between its levels once per
// period, at its offset into the period, as long as a whole period is left
// before end, so every change has one to be applied in.
func switchLoads(ctx context.Context, cfg Config, targets []kpaTarget, start, end time.Time, rec *recorder, farm *podFarm) {
	type event struct {
		at time.Time
		i  int
	}
	var events []event
	for i, t := range targets {
		if !t.switching {
			continue
		}
		for at := start.Add(t.offset); !at.Add(cfg.SwitchPeriod).After(end); at = at.Add(cfg.SwitchPeriod) {
			events = append(events, event{at, i})
		}
	}
	sort.Slice(events, func(a, b int) bool { return events[a].at.Before(events[b].at) })
	high := make([]bool, len(targets))
	for _, e := range events {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(e.at)):
		}
		t := targets[e.i]
		from, to := t.low, t.high
		if high[e.i] {
			from, to = to, from
		}
		high[e.i] = !high[e.i]
		farm.SetLoad(t.name, concurrency(to))
		rec.switched(t.name, time.Now(), from, to)
	}
	<-ctx.Done()
}
