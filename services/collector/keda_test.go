package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/proto/externalscaler"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// startDeciderProcess builds and runs the real decider (with an actuator
// that only records, so decisions go somewhere) on loopback.
func startDeciderProcess(t *testing.T) *system.Proc {
	t.Helper()
	dec, _ := startDeciderAndActuator(t)
	return dec
}

// startDeciderAndActuator is startDeciderProcess, returning the actuator
// too.
func startDeciderAndActuator(t *testing.T) (dec, act *system.Proc) {
	t.Helper()
	bin, logs := buildServices(t, "decider", "actuator"), t.TempDir()
	act = startService(t, bin, logs, "actuator", "--scaler", "memory")
	return startService(t, bin, logs, "decider", "--actuator-addr", act.GRPCAddr), act
}

// buildServices builds the services' binaries into a directory of the
// test's and returns it.
func buildServices(t *testing.T, svcs ...string) string {
	t.Helper()
	bin := t.TempDir()
	for _, svc := range svcs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "tidal-"+svc), "./services/"+svc)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", svc, err, out)
		}
	}
	return bin
}

// startService runs service svc from bin as a process, its log in logs,
// until t ends.
func startService(t *testing.T, bin, logs, svc string, args ...string) *system.Proc {
	t.Helper()
	p, err := system.NewProc(svc, bin, svc, logs, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", svc, p.LogTail(40))
		}
	})
	return p
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kedaPath drives the collector's external scaler as KEDA does, for a
// trigger whose tidal target gets pushed stats: GetMetricSpec, an open
// StreamIsActive that turns true when the first requests arrive, and
// GetMetrics and IsActive that answer the owning decider's decision.
func kedaPath(t *testing.T, collectorAddr string, decider deciderv1.DeciderServiceClient, md map[string]string, wantMetric string, target *commonv1.TargetRef) {
	t.Helper()
	conn := dialPlain(t, collectorAddr)
	keda := externalscaler.NewExternalScalerClient(conn)
	push := collectorv1.NewCollectorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	so := &externalscaler.ScaledObjectRef{Name: "so", Namespace: target.GetNamespace(), ScalerMetadata: md}

	var spec *externalscaler.GetMetricSpecResponse
	// The collector may still be priming its informers.
	testkit.Eventually(t, 90*time.Second, "GetMetricSpec answered", func() bool {
		var err error
		spec, err = keda.GetMetricSpec(ctx, so)
		return err == nil
	})
	if ms := spec.GetMetricSpecs(); len(ms) != 1 || ms[0].GetMetricName() != wantMetric || ms[0].GetTargetSizeFloat() != 1 {
		t.Fatalf("GetMetricSpec = %v, want %s against 1", spec, wantMetric)
	}

	// Before any request tidal has no decision (UNAVAILABLE), or its
	// decider has not heard of the target yet (NOT_FOUND): never true.
	if act, err := keda.IsActive(ctx, so); err == nil && act.GetResult() {
		t.Errorf("IsActive before any request = true")
	} else if c := status.Code(err); c != codes.OK && c != codes.Unavailable && c != codes.NotFound {
		t.Errorf("IsActive before any request: %v, want UNAVAILABLE, NOT_FOUND or false", err)
	}

	st, err := keda.StreamIsActive(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	activated := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				activated <- err
				return
			}
			if r.GetResult() {
				activated <- nil
				return
			}
		}
	}()
	pushed := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		// An activator's stat while requests wait for the first pod; a
		// collector still setting its targets up does not know it yet.
		if _, err := push.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: target, PodName: "activator-0", AverageConcurrency: 40, RequestCount: 40,
		}}}); err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("PushStats: %v", err)
		}
		select {
		case err := <-activated:
			if err != nil {
				t.Fatalf("StreamIsActive ended before true: %v", err)
			}
			t.Logf("StreamIsActive pushed true %s after the first stat", time.Since(pushed).Round(time.Millisecond))
			break wait
		case <-ctx.Done():
			t.Fatal("StreamIsActive never pushed true")
		case <-tick.C:
		}
	}

	// GetMetrics is the decider's number: compare with the decision read
	// right after, retrying across a tick that changed it in between.
	for i := 0; ; i++ {
		m, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: so, MetricName: wantMetric})
		if err != nil {
			t.Fatalf("GetMetrics: %v", err)
		}
		d, err := decider.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: target})
		if err != nil {
			t.Fatalf("GetDecision: %v", err)
		}
		v := m.GetMetricValues()[0]
		want := d.GetDecision().GetDesiredReplicas()
		if v.GetMetricValueFloat() == float64(want) && v.GetMetricValue() == int64(want) && want > 0 {
			break
		}
		if i == 10 {
			t.Fatalf("GetMetrics = %v, the decider's desired replicas %d", v, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if act, err := keda.IsActive(ctx, so); err != nil || !act.GetResult() {
		t.Errorf("IsActive = %v, %v; want true", act, err)
	}
}

// TestKEDAFollowsAPodAutoscaler: the collector in Kubernetes mode answers
// a trigger naming a PodAutoscaler with the decision the real decider made
// for the PodAutoscaler's scale target.
func TestKEDAFollowsAPodAutoscaler(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	dec := startDeciderProcess(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// No scrape target: pushed stats are the measurements (Knative's TBC=-1).
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       autoscalingv1alpha1.MetricSpec{StableWindow: metav1.Duration{Duration: time.Minute}},
	}
	createKPA(t, tidal, ns, "web", "web-deployment")
	if _, err := tidal.AutoscalingV1alpha1().Metrics(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	col := runCollector(t, "--kubeconfig", c.Kubeconfig, "--decider-addr", dec.GRPCAddr)
	decider := deciderv1.NewDeciderServiceClient(dialPlain(t, dec.GRPCAddr))
	target := &commonv1.TargetRef{Namespace: ns, Name: "web-deployment"}
	kedaPath(t, col, decider, map[string]string{"podAutoscaler": "web", "scalerAddress": col}, "tidal-podautoscaler-"+ns+"-web", target)

	keda := externalscaler.NewExternalScalerClient(dialPlain(t, col))
	_, err = keda.IsActive(ctx, &externalscaler.ScaledObjectRef{Namespace: ns, ScalerMetadata: map[string]string{"podAutoscaler": "nope"}})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "PodAutoscaler "+ns+"/nope") {
		t.Errorf("IsActive of a missing PodAutoscaler: %v, want NOT_FOUND naming it", err)
	}
}

// TestKEDAFollowsAFunctionWithoutKubernetes: a collector with pushed
// targets answers a trigger naming a Function with its Deployment's
// decision, and refuses a PodAutoscaler it cannot look up.
func TestKEDAFollowsAFunctionWithoutKubernetes(t *testing.T) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		t.Skip("--discovery=auto would pick Kubernetes in a pod")
	}
	dec := startDeciderProcess(t)
	col := runCollector(t, "--discovery", "push", "--decider-addr", dec.GRPCAddr)
	decider := deciderv1.NewDeciderServiceClient(dialPlain(t, dec.GRPCAddr))
	target := &commonv1.TargetRef{Namespace: "fns", Name: "square"}
	kedaPath(t, col, decider, map[string]string{"function": "square", "namespace": "fns"}, "tidal-function-fns-square", target)

	keda := externalscaler.NewExternalScalerClient(dialPlain(t, col))
	_, err := keda.IsActive(context.Background(), &externalscaler.ScaledObjectRef{Namespace: "fns", ScalerMetadata: map[string]string{"podAutoscaler": "web"}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("IsActive of a PodAutoscaler without Kubernetes: %v, want FAILED_PRECONDITION", err)
	}
}
