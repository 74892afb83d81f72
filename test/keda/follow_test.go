package keda

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/scalers"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/metrics/pkg/apis/external_metrics"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
	"github.com/tidalscale/tidal/test/workload"
)

// The KPA workload's settings, as in test/e2e: a 6 s stable window, 10
// concurrent requests per pod at 70 % (7 per pod), requests of 100 ms, so
// heavyLoad requests per second need ceil(heavyLoad/70) pods.
const (
	kpaWindow      = 6 * time.Second
	kpaServiceTime = 100 * time.Millisecond
	heavyLoad      = 300.0
	heavyPods      = 5
)

// annotationDryRun is tidal's dry-run annotation, which the README has users
// put on a PodAutoscaler that KEDA scales: tidal decides and explains, and
// changes nothing.
const annotationDryRun = "autoscaling.tidal.dev/dry-run"

var kpaAnnotations = map[string]string{
	"autoscaling.knative.dev/window":                        kpaWindow.String(),
	"autoscaling.knative.dev/panic-window-percentage":       "50",
	"autoscaling.knative.dev/target":                        "10",
	"autoscaling.knative.dev/target-utilization-percentage": "70",
	annotationDryRun: "true",
}

// pushLatencyBound is how soon after tidal's decision KEDA's push scaler
// must report the change: the point of external-push is not waiting for
// KEDA's polling (30 s by default), and the collector follows the decider's
// WatchDecisions stream, so this is a bound for a loaded CI machine, not
// the expected figure (logged).
const pushLatencyBound = 2 * time.Second

// TestFollowPodAutoscaler runs the README's example that follows a
// PodAutoscaler as the README sets it up: the ScaledObject and the chart's
// ClusterTriggerAuthentication in the API server, the client certificate
// from the Secret in KEDA's namespace, the PodAutoscaler in dry-run so that
// only KEDA scales its Deployment, and KEDA's own operator and metrics
// server with kube-controller-manager's HPA doing the scaling. Before tidal
// has a decision KEDA gets an error, never a zero; load arrives at zero,
// tidal decides N > 0 and the push stream reports it at once, which takes
// the Deployment off zero (KEDA's operator); KEDA's metric spec is one
// AverageValue metric with target 1, its value is tidal's desired
// replicas, and the HPA, reading it through the external metrics API,
// brings the Deployment to tidal's number; when the load goes, tidal
// decides 0, KEDA reads a true 0, inactive, and its operator takes the
// Deployment to zero after cooldownPeriod. KEDA's scaler code also runs in
// this process beside the operator, to compare each value it reads with
// tidal's decision and time the push stream.
func TestFollowPodAutoscaler(t *testing.T) {
	kedaLog.follow(t)
	ex := loadExamples(t)
	found := ex.find("podAutoscaler", "external", "external-push")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject with an external or external-push trigger following a podAutoscaler in %s", *examplesDir)
	}
	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, false)
	startKEDA(t, c)
	for _, e := range found {
		t.Run(e.so.Name, func(t *testing.T) {
			kedaLog.follow(t)
			followPodAutoscaler(t, c, sys, tc, ex, e)
		})
	}
}

func followPodAutoscaler(t *testing.T, c *cluster.Cluster, sys *system.System, tc *certs, ex *examples, e exampleTrigger) {
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}
	paName := e.trigger().Metadata["podAutoscaler"]
	ref := e.so.Spec.ScaleTargetRef
	if ref == nil || (ref.Kind != "" && ref.Kind != "Deployment") {
		t.Fatalf("%s: scaleTargetRef %+v: the test runs a Deployment", e, ref)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The target, at zero with no load: tidal has nothing to decide on. It
	// comes first, so that KEDA's operator finds the PodAutoscaler when it
	// asks tidal for the metric spec.
	load := system.NewDial(0)
	w := startKPATarget(t, ctx, c, ns, paName, ref.Name, load)
	rec := recordReplicas(ctx, t, c, ns, ref.Name)
	obs := newDecisionLog(t, ctx, &wg, sys, ns, ref.Name)

	overrides := map[string]string{}
	if _, ok := e.trigger().Metadata["namespace"]; ok {
		overrides["namespace"] = ns // the example's namespace is the test's
	}
	cfg := d.apply(t, ex, e, e.so.Name, overrides)
	scaler := newScaler(t, cfg)
	t.Logf("%s: KEDA's %s scaler for PodAutoscaler %s/%s (Deployment %s) via %s", e, cfg.TriggerType, ns, paName, ref.Name, d.scalerAddr)

	// KEDA asks for the spec when it builds the scaler; tidal answers once
	// the collector's informer has seen the PodAutoscaler.
	var specs []autoscalingv2.MetricSpec
	testkit.Eventually(t, 10*time.Second, "KEDA's GetMetricSpecForScaling to give a spec after the PodAutoscaler was created", func() bool {
		specs = scaler.GetMetricSpecForScaling(ctx)
		return len(specs) > 0
	}, func() string { return "KEDA logs its error above" })
	metricName := checkSpec(t, specs, cfg.TriggerIndex, fmt.Sprintf("tidal-podautoscaler-%s-%s", ns, paName))
	var pushed *activityLog
	if ps, ok := scaler.(scalers.PushScaler); ok {
		pushed = runPush(ctx, &wg, ps)
	}
	so := &kedav1alpha1.ScaledObject{}
	so.Name, so.Namespace = e.so.Name, ns
	hpaName := waitReady(t, d, so)

	// No decision yet: KEDA's call fails; it never reads a zero.
	checks := 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		before := obs.explain(ctx)
		vals, active, err := scaler.GetMetricsAndActivity(ctx, metricName)
		after := obs.explain(ctx)
		if before >= 0 || after >= 0 {
			break // tidal decided meanwhile
		}
		if err == nil {
			t.Fatalf("before tidal's first decision: KEDA read %v (active %v), want an error", values(vals), active)
		}
		if code := status.Code(err); code != codes.Unavailable && code != codes.NotFound {
			t.Errorf("before tidal's first decision: %v; want UNAVAILABLE (no decision yet) or NOT_FOUND (decider does not hold it yet)", err)
		}
		checks++
		time.Sleep(200 * time.Millisecond)
	}
	if checks == 0 {
		t.Errorf("tidal decided for a target with no pods and no load within a second; the no-decision check did not run (Explain: %d)", obs.explain(ctx))
	}
	t.Logf("no decision yet: %d KEDA calls answered with an error", checks)
	if pushed != nil {
		if evs := pushed.events(); len(evs) > 0 {
			t.Errorf("push stream sent %v before tidal's first decision; want nothing", evs)
		}
	}
	if got := rec.values(); len(got) != 1 || got[0] != 0 {
		t.Errorf("the Deployment went %v before tidal's first decision; want it left at 0", got)
	}

	// Every 2 s, a line of what each side sees, for the log of a failure.
	wg.Add(1)
	go func() {
		defer wg.Done()
		progress(ctx, t, c, ns, ref.Name, obs, w, rec)
	}()

	// Load arrives at zero: the activator reports it, tidal decides N > 0.
	loadAt := time.Now()
	load.Set(heavyLoad)
	wg.Add(1)
	go func() {
		defer wg.Done()
		runActivator(ctx, t, sys, &commonv1.TargetRef{Namespace: ns, Name: ref.Name}, w, load)
	}()
	up := obs.waitFor(t, loadAt, 30*time.Second, "tidal's first decision above 0", func(d *commonv1.Decision) bool { return d.GetDesiredReplicas() > 0 })
	decided := up.dec.GetDecideTime().AsTime()
	t.Logf("tidal decided %d (%q), decision time %s, seen on WatchDecisions %s later", up.dec.GetDesiredReplicas(),
		up.dec.GetReason(), decided.Format("15:04:05.000"), up.at.Sub(decided).Round(time.Millisecond))
	if pushed != nil {
		ev := pushed.waitFor(t, 10*time.Second, "KEDA's push stream to report active", true)
		lat := ev.at.Sub(decided)
		t.Logf("push: KEDA's StreamIsActive reported active %s after tidal's decision time, %s after the decider streamed it",
			lat.Round(time.Millisecond), ev.at.Sub(up.at).Round(time.Millisecond))
		if lat > pushLatencyBound {
			t.Errorf("push: active %s after tidal's decision to scale from zero; want within %s", lat, pushLatencyBound)
		}
		for _, ev := range pushed.events() {
			if ev.active && ev.at.Before(decided) {
				t.Errorf("push: active at %s, before tidal's first decision above 0 (%s)", ev.at, decided)
			}
		}
	}
	// KEDA's operator acts on the push at once, not at its next poll (the
	// example leaves pollingInterval at KEDA's 30 s).
	testkit.Eventually(t, 10*time.Second, "KEDA to take the Deployment off zero", func() bool { return rec.current() > 0 },
		func() string { return fmt.Sprintf("changes %v", rec.changes()) })
	first := rec.changes()[1]
	offZero := first.at.Sub(decided)
	t.Logf("KEDA scaled the Deployment 0 → %d %s after tidal's decision time", first.replicas, offZero.Round(time.Millisecond))
	if pushed != nil && offZero > pushLatencyBound {
		t.Errorf("KEDA took the Deployment off zero %s after tidal's decision; want within %s", offZero, pushLatencyBound)
	}

	// Steady heavy load: KEDA's value is tidal's number, and the HPA brings
	// the Deployment there.
	obs.waitFor(t, loadAt, 90*time.Second, fmt.Sprintf("tidal to settle at %d replicas", heavyPods), func(d *commonv1.Decision) bool {
		return d.GetDesiredReplicas() == heavyPods && !d.GetPanicking()
	})
	compareValues(t, ctx, scaler, obs, metricName, 5, nil)
	// The HPA syncs every 15 s; tidal's number may still move by one
	// within its window, so the Deployment must meet it, whichever it is.
	var dep *appsv1.Deployment
	testkit.Eventually(t, 90*time.Second, "the Deployment, scaled by KEDA and its HPA alone, at tidal's replicas, all ready", func() bool {
		var err error
		if dep, err = c.Client.AppsV1().Deployments(ns).Get(ctx, ref.Name, metav1.GetOptions{}); err != nil {
			return false
		}
		n := obs.explain(ctx)
		return n > 0 && dep.Spec.Replicas != nil && *dep.Spec.Replicas == n && dep.Status.ReadyReplicas == n
	}, func() string {
		return fmt.Sprintf("Deployment %v replicas (%d ready); tidal decides %d; changes %v",
			deref(dep.Spec.Replicas, -1), dep.Status.ReadyReplicas, obs.explain(ctx), rec.changes())
	})
	t.Logf("the Deployment has tidal's %d replicas, all ready; changes %v", *dep.Spec.Replicas, rec.changes())
	// At 1, KEDA's operator made the count (0 → 1), not the HPA.
	if *dep.Spec.Replicas > 1 {
		if ev := rescaleEvent(t, c, ns, hpaName, *dep.Spec.Replicas); ev != "" {
			t.Logf("HPA %s: %s", hpaName, ev)
		} else {
			t.Errorf("no SuccessfulRescale event of HPA %s to %d: the HPA did not make the Deployment's count", hpaName, *dep.Spec.Replicas)
		}
	}

	// The load goes: tidal decides 0 after its stable window; KEDA reads a
	// true 0, inactive, and the push stream says so.
	offAt := time.Now()
	load.Set(0)
	down := obs.waitFor(t, offAt, kpaWindow+30*time.Second, "tidal's decision of 0 after the load went", func(d *commonv1.Decision) bool {
		return d.GetDesiredReplicas() == 0
	})
	compareValues(t, ctx, scaler, obs, metricName, 2, nil)
	if pushed != nil {
		ev := pushed.waitFor(t, 10*time.Second, "KEDA's push stream to report inactive", false)
		t.Logf("push: inactive reported %s after tidal's decision of 0", ev.at.Sub(down.dec.GetDecideTime().AsTime()).Round(time.Millisecond))
	}
	// KEDA's operator takes it to zero once cooldownPeriod has passed
	// since its last active poll or push.
	cooldown := time.Duration(deref(e.so.Spec.CooldownPeriod, 300)) * time.Second
	rec.waitFor(t, cooldown+time.Minute, "KEDA to take the Deployment to zero", 0)
	t.Logf("back to zero %s after tidal's decision of 0 (cooldownPeriod %s); changes %v",
		time.Since(down.dec.GetDecideTime().AsTime()).Round(time.Millisecond), cooldown, rec.changes())
}

// progress logs, every 2 s until ctx ends, tidal's decision, the
// Deployment's replicas and the workload's pods and requests.
func progress(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, dep string, obs *decisionLog, w *workload.Workload, rec *replicaLog) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		replicas, ready := int32(-1), int32(-1)
		if d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, dep, metav1.GetOptions{}); err == nil {
			replicas, ready = deref(d.Spec.Replicas, -1), d.Status.ReadyReplicas
		}
		r := w.Report()
		t.Logf("progress: tidal %d; Deployment %d (%d ready); pods %d (%d warm), %d in service, %d queued; replica changes %d",
			obs.explain(ctx), replicas, ready, r.Pods, r.WarmPods, r.InService, r.Queued, len(rec.changes()))
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// startKPATarget creates Deployment dep at zero replicas and PodAutoscaler
// pa scaling it (KPA, dry-run), and serves its pods' queue-proxy metrics
// under load until t ends.
func startKPATarget(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, pa, dep string, load workload.Profile) *workload.Workload {
	t.Helper()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment(dep, nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crds, err := tidalClient(c)
	if err != nil {
		t.Fatal(err)
	}
	obj := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: pa, Namespace: ns, Annotations: kpaAnnotations},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: dep},
			Strategy:       autoscalingv1alpha1.StrategyKPA,
		},
	}
	if _, err := crds.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("podautoscaler %s/%s: %v", ns, pa, err)
	}
	w, err := workload.Start(ctx, workload.Options{
		Client: c.Client, Namespace: ns, Deployment: dep, Profile: load,
		Model: workload.ModelConfig{ServiceTime: kpaServiceTime, ColdStart: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// runActivator plays Knative's activator until ctx ends: while the
// workload has no warm pod and requests wait, it pushes a stat with the
// waiting requests to the collector (as the activator identity), which
// pokes the decider out of zero.
func runActivator(ctx context.Context, t *testing.T, sys *system.System, ref *commonv1.TargetRef, w *workload.Workload, load workload.Profile) {
	conn, err := sys.Collectors[0].Conn()
	if err != nil {
		t.Errorf("activator: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	client := collectorv1.NewCollectorServiceClient(conn)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := w.Report()
		if r.WarmPods > 0 || r.Queued == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := client.PushStats(cctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: ref, PodName: "activator-0", AverageConcurrency: float64(r.Queued), RequestCount: load.Rate(0),
		}}})
		cancel()
		if err != nil && ctx.Err() == nil {
			t.Errorf("activator stat for %s: %v", ref.Key(), err)
			return
		}
	}
}

// checkSpec checks KEDA's metric spec for a follow trigger: one External
// metric named s<index>-<name>, AverageValue target 1. It returns the name.
func checkSpec(t *testing.T, specs []autoscalingv2.MetricSpec, index int, name string) string {
	t.Helper()
	if len(specs) != 1 || specs[0].External == nil {
		t.Fatalf("KEDA's metric spec: %+v; want one External metric", specs)
	}
	ext := specs[0].External
	want := scalers.GenerateMetricNameWithIndex(index, name)
	if ext.Metric.Name != want {
		t.Errorf("metric name %q, want %q", ext.Metric.Name, want)
	}
	if specs[0].Type != autoscalingv2.ExternalMetricSourceType || ext.Target.Type != autoscalingv2.AverageValueMetricType ||
		ext.Target.AverageValue == nil || ext.Target.AverageValue.MilliValue() != 1000 {
		t.Fatalf("metric target %+v (%s); want AverageValue 1", ext.Target, specs[0].Type)
	}
	return ext.Metric.Name
}

// compareValues asks KEDA for the metric n times, a second apart, and
// checks each answer against tidal's decision read just before and just
// after (a round where the decision changed in between is not counted):
// the value is the desired replicas, active is desired > 0. each, when set,
// checks the HPA's arithmetic on every counted answer.
func compareValues(t *testing.T, ctx context.Context, s scalers.Scaler, obs *decisionLog, metric string, n int, each func(desired int32, milli int64)) {
	t.Helper()
	counted := 0
	for round := 0; counted < n && round < 3*n; round++ {
		if round > 0 {
			time.Sleep(time.Second)
		}
		before := obs.explain(ctx)
		vals, active, err := s.GetMetricsAndActivity(ctx, metric)
		after := obs.explain(ctx)
		if before != after || before < 0 {
			continue
		}
		if err != nil {
			t.Errorf("KEDA's GetMetricsAndActivity with tidal at %d: %v", before, err)
			continue
		}
		if len(vals) != 1 || vals[0].MetricName != metric {
			t.Errorf("KEDA's metric values %v; want one value of %s", values(vals), metric)
			continue
		}
		counted++
		milli := vals[0].Value.MilliValue()
		if milli != int64(before)*1000 || active != (before > 0) {
			t.Errorf("KEDA read %dm, active %v; tidal's decision is %d replicas", milli, active, before)
		}
		if each != nil {
			each(before, milli)
		}
	}
	if counted < n {
		t.Errorf("only %d of %d KEDA reads came while tidal's decision held still", counted, n)
	}
}

// maxEvents bounds what a log keeps: a test runs for a few minutes at one
// decision per 2 s tick, or one KEDA change per second at most.
const maxEvents = 10000

// decisionLog follows the target's decisions on the decider's
// WatchDecisions stream and answers Explain.
type decisionLog struct {
	ref     *commonv1.TargetRef
	decider deciderv1.DeciderServiceClient

	mu   sync.Mutex
	seen []seenDecision
}

type seenDecision struct {
	at  time.Time
	dec *commonv1.Decision
}

func newDecisionLog(t *testing.T, ctx context.Context, wg *sync.WaitGroup, sys *system.System, ns, name string) *decisionLog {
	t.Helper()
	conn, err := sys.Decider.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	l := &decisionLog{ref: &commonv1.TargetRef{Namespace: ns, Name: name}, decider: deciderv1.NewDeciderServiceClient(conn)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := l.watch(ctx, ns, name)
			if ctx.Err() != nil {
				return
			}
			t.Logf("WatchDecisions ended (%v); reopening", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return l
}

func (l *decisionLog) watch(ctx context.Context, ns, name string) error {
	st, err := l.decider.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: ns})
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		d := resp.GetDecision()
		if d.GetTarget().GetName() != name || d.GetTarget().GetNamespace() != ns {
			continue
		}
		l.mu.Lock()
		if len(l.seen) < maxEvents {
			l.seen = append(l.seen, seenDecision{at: time.Now(), dec: d})
		}
		l.mu.Unlock()
	}
}

// explain is the decider's current desired replicas for the target, -1 when
// it has none (or does not hold the target).
func (l *decisionLog) explain(ctx context.Context) int32 {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := l.decider.Explain(cctx, &deciderv1.ExplainRequest{Target: l.ref})
	if err != nil {
		return -1
	}
	return resp.GetDecision().GetDesiredReplicas()
}

// waitFor returns the first decision streamed after from that satisfies
// cond.
func (l *decisionLog) waitFor(t *testing.T, from time.Time, timeout time.Duration, what string, cond func(*commonv1.Decision) bool) seenDecision {
	t.Helper()
	var got seenDecision
	var last *commonv1.Decision
	testkit.Eventually(t, timeout, what, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, s := range l.seen {
			if !s.at.Before(from) && cond(s.dec) {
				got = s
				return true
			}
		}
		if len(l.seen) > 0 {
			last = l.seen[len(l.seen)-1].dec
		}
		return false
	}, func() string {
		return fmt.Sprintf("last decision: %d (%q)", last.GetDesiredReplicas(), last.GetReason())
	})
	return got
}

// activityLog records what KEDA's push scaler reports on its active channel.
type activityLog struct {
	// changed has a token after each report.
	changed chan struct{}

	mu  sync.Mutex
	evs []activity
}

type activity struct {
	at     time.Time
	active bool
}

func (a activity) String() string { return fmt.Sprintf("%v@%s", a.active, a.at.Format("15:04:05.000")) }

// runPush runs the push scaler's Run (KEDA's StreamIsActive loop) until ctx
// ends, recording each report.
func runPush(ctx context.Context, wg *sync.WaitGroup, ps scalers.PushScaler) *activityLog {
	l := &activityLog{changed: make(chan struct{}, 1)}
	ch := make(chan bool)
	wg.Add(2)
	go func() {
		defer wg.Done()
		ps.Run(ctx, ch) // closes ch when it returns
	}()
	go func() {
		defer wg.Done()
		for v := range ch {
			l.mu.Lock()
			if len(l.evs) < maxEvents {
				l.evs = append(l.evs, activity{at: time.Now(), active: v})
			}
			l.mu.Unlock()
			select {
			case l.changed <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *activityLog) events() []activity {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]activity(nil), l.evs...)
}

// waitFor returns the report that made the activity what it is now, once
// that is active.
func (l *activityLog) waitFor(t *testing.T, timeout time.Duration, what string, active bool) activity {
	t.Helper()
	var evs []activity
	testkit.Eventually(t, timeout, what, func() bool {
		evs = l.events()
		return len(evs) > 0 && evs[len(evs)-1].active == active
	}, func() string { return fmt.Sprintf("reports: %v", evs) })
	i := len(evs) - 1
	for i > 0 && evs[i-1].active == active {
		i--
	}
	return evs[i]
}

// values shows metric values briefly.
func values(vals []external_metrics.ExternalMetricValue) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v.MetricName + "=" + v.Value.String()
	}
	return out
}
