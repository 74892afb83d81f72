package keda

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// The Function workload: records produced at fnRate onto fnPartitions
// partitions, each pod consuming fnPerPod a second, so under load tidal
// wants every partition served (its lag strategy caps at the partitions).
const (
	fnPartitions = 4
	fnRate       = 300.0
	fnPerPod     = 50.0
	fnIdle       = 3 * time.Second
)

// TestFollowFunction runs docs/keda.md's example that follows a Function
// (type external: KEDA polls) through KEDA's own scaler: a backlog makes
// tidal decide N > 0 and KEDA reads N against a target of 1, active (on
// which the HPA lands on N: TestFollowFunctionThroughKEDA); once the records are consumed and the Function
// idles, tidal decides 0 and KEDA reads a true 0, inactive. Here tidal's
// actuator scales the Function (no KEDA loop), so its consumers drain the
// backlog.
func TestFollowFunction(t *testing.T) {
	kedaLog.follow(t)
	ex := loadExamples(t)
	found := ex.find("function", "external", "external-push")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject following a function in %s", *examplesDir)
	}
	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, true)
	for _, e := range found {
		t.Run(e.so.Name, func(t *testing.T) {
			kedaLog.follow(t)
			followFunction(t, c, sys, tc, ex, e)
		})
	}
}

func followFunction(t *testing.T, c *cluster.Cluster, sys *system.System, tc *certs, ex *examples, e exampleTrigger) {
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}
	fn := e.trigger().Metadata["function"]
	overrides := map[string]string{}
	if _, ok := e.trigger().Metadata["namespace"]; ok {
		overrides["namespace"] = ns // the example's namespace is the test's
	}
	cfg := d.apply(t, ex, e, e.so.Name, overrides)
	scaler := newScaler(t, cfg)
	t.Logf("%s: KEDA's %s scaler for Function %s/%s via %s", e, cfg.TriggerType, ns, fn, d.scalerAddr)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	produce := system.NewDial(0)
	idle, maxReplicas := fnIdle, int32(fnPartitions)
	f, err := sys.StartFunction(ctx, system.FunctionOptions{
		Namespace: ns, Name: fn, Topic: fn + "-in", Partitions: fnPartitions,
		IdleTimeout: &idle, MaxReplicas: &maxReplicas,
		Produce: produce, RatePerPod: fnPerPod, ColdStart: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	// A Function's target is its Deployment, of the Function's name.
	obs := newDecisionLog(t, ctx, &wg, sys, ns, fn)

	var specs []autoscalingv2.MetricSpec
	testkit.Eventually(t, 10*time.Second, "KEDA's GetMetricSpecForScaling to give a spec after the Function was created", func() bool {
		specs = scaler.GetMetricSpecForScaling(ctx)
		return len(specs) > 0
	}, func() string { return "KEDA logs its error above" })
	metric := checkSpec(t, specs, cfg.TriggerIndex, fmt.Sprintf("tidal-function-%s-%s", ns, fn))

	// A backlog: tidal decides N > 0, and KEDA reads N, active.
	loadAt := time.Now()
	produce.Set(fnRate)
	up := obs.waitFor(t, loadAt, 30*time.Second, "tidal's first decision above 0", func(d *commonv1.Decision) bool { return d.GetDesiredReplicas() > 0 })
	t.Logf("tidal decided %d (%q)", up.dec.GetDesiredReplicas(), up.dec.GetReason())
	obs.waitFor(t, loadAt, 30*time.Second, fmt.Sprintf("tidal to serve all %d partitions", fnPartitions), func(d *commonv1.Decision) bool {
		return d.GetDesiredReplicas() == fnPartitions
	})
	// KEDA reads tidal's number against a target of 1: the HPA lands on
	// it (TestFollowFunctionThroughKEDA runs the real one).
	compareValues(t, ctx, scaler, obs, metric, 3, nil)

	// The producer stops; the consumers drain the backlog, the Function
	// idles and tidal decides 0: KEDA reads a true 0, inactive.
	offAt := time.Now()
	produce.Set(0)
	obs.waitFor(t, offAt, fnIdle+60*time.Second, "tidal's decision of 0 once the backlog is consumed and the Function idled", func(d *commonv1.Decision) bool {
		return d.GetDesiredReplicas() == 0
	})
	compareValues(t, ctx, scaler, obs, metric, 2, nil)
}

// TestFollowFunctionThroughKEDA runs docs/keda.md's example that follows a
// Function with its trigger as external-push, through KEDA's own operator
// and metrics server and kube-controller-manager's HPA, the Function's
// PodAutoscaler in dry-run so that KEDA alone scales its Deployment, whose
// pods the Function's consumers follow: a backlog takes the Deployment off
// zero (KEDA's operator, on the push) and to tidal's number (the HPA); once
// the producer stops, the consumers drain the backlog, the Function idles,
// tidal decides 0 and KEDA takes the Deployment to zero after
// cooldownPeriod.
func TestFollowFunctionThroughKEDA(t *testing.T) {
	kedaLog.follow(t)
	ex := loadExamples(t)
	found := ex.find("function", "external", "external-push")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject following a function in %s", *examplesDir)
	}
	e := found[0]
	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, true)
	startKEDA(t, c)
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}
	fn := e.trigger().Metadata["function"]

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	produce := system.NewDial(0)
	idle, maxReplicas := fnIdle, int32(fnPartitions)
	f, err := sys.StartFunction(ctx, system.FunctionOptions{
		Namespace: ns, Name: fn, Topic: fn + "-in", Partitions: fnPartitions,
		IdleTimeout: &idle, MaxReplicas: &maxReplicas,
		Produce: produce, RatePerPod: fnPerPod, ColdStart: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	crds, err := tidalClient(c)
	if err != nil {
		t.Fatal(err)
	}
	// The Function's PodAutoscaler and Deployment, both of its name, made
	// by tidal's actuator; the PodAutoscaler goes to dry-run, as
	// docs/keda.md has users do.
	testkit.Eventually(t, time.Minute, "the Function's PodAutoscaler and Deployment", func() bool {
		_, perr := crds.AutoscalingV1alpha1().PodAutoscalers(ns).Get(ctx, fn, metav1.GetOptions{})
		_, derr := c.Client.AppsV1().Deployments(ns).Get(ctx, fn, metav1.GetOptions{})
		return perr == nil && derr == nil
	})
	patch := []byte(`{"metadata":{"annotations":{"` + annotationDryRun + `":"true"}}}`)
	if _, err := crds.AutoscalingV1alpha1().PodAutoscalers(ns).Patch(ctx, fn, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("dry-run the Function's PodAutoscaler: %v", err)
	}
	rec := recordReplicas(ctx, t, c, ns, fn)
	obs := newDecisionLog(t, ctx, &wg, sys, ns, fn)

	overrides := map[string]string{}
	if _, ok := e.trigger().Metadata["namespace"]; ok {
		overrides["namespace"] = ns // the example's namespace is the test's
	}
	so := d.create(t, ex, e, e.so.Name, overrides, func(so *kedav1alpha1.ScaledObject) {
		so.Spec.Triggers[e.index].Type = "external-push"
	})
	hpaName := waitReady(t, d, so)

	// A backlog: tidal decides N > 0, the push takes the Deployment off
	// zero, the HPA to tidal's number.
	loadAt := time.Now()
	produce.Set(fnRate)
	up := obs.waitFor(t, loadAt, 30*time.Second, "tidal's first decision above 0", func(d *commonv1.Decision) bool { return d.GetDesiredReplicas() > 0 })
	decided := up.dec.GetDecideTime().AsTime()
	testkit.Eventually(t, 10*time.Second, "KEDA to take the Deployment off zero", func() bool { return rec.current() > 0 },
		func() string { return fmt.Sprintf("changes %v", rec.changes()) })
	t.Logf("tidal decided %d; KEDA scaled the Deployment 0 → %d %s after tidal's decision time", up.dec.GetDesiredReplicas(),
		rec.changes()[1].replicas, rec.changes()[1].at.Sub(decided).Round(time.Millisecond))
	rec.waitFor(t, 2*time.Minute, fmt.Sprintf("tidal's %d replicas through the HPA", fnPartitions), fnPartitions)
	if ev := rescaleEvent(t, c, ns, hpaName, fnPartitions); ev == "" {
		t.Errorf("no SuccessfulRescale event of HPA %s to %d", hpaName, fnPartitions)
	} else {
		t.Logf("HPA %s: %s", hpaName, ev)
	}

	// The producer stops: the backlog drains on the Deployment's pods, the
	// Function idles, tidal decides 0 and KEDA goes to zero.
	offAt := time.Now()
	produce.Set(0)
	down := obs.waitFor(t, offAt, 3*time.Minute, "tidal's decision of 0 once the backlog is consumed and the Function idled", func(d *commonv1.Decision) bool {
		return d.GetDesiredReplicas() == 0
	})
	cooldown := time.Duration(deref(e.so.Spec.CooldownPeriod, 300)) * time.Second
	rec.waitFor(t, cooldown+time.Minute, "KEDA to take the Deployment to zero", 0)
	t.Logf("back to zero %s after tidal's decision of 0 (cooldownPeriod %s); changes %v",
		time.Since(down.dec.GetDecideTime().AsTime()).Round(time.Millisecond), cooldown, rec.changes())
}
