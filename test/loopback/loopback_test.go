// Package loopback runs the three tidal binaries as separate processes on
// loopback and checks the path from a pushed stat to a Scale call, the
// health and reflection services, and request validation.
package loopback

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidal-loopback-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		if err := system.Build(context.Background(), dir, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// start runs one binary with free ports until the test ends, waiting until
// its health service says SERVING.
func start(t *testing.T, svc string, args ...string) *system.Proc {
	t.Helper()
	p, err := system.NewProc(svc, binDir, svc, t.TempDir(), append([]string{"--log-level", "debug"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			testkit.KeepLog(t, svc, p.LogTail(1<<20))
		}
	})
	return p
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// grpcurl runs the pinned grpcurl against addr.
func grpcurl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "-modfile=../../tools/go.mod", "grpcurl", "-plaintext"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestEachBinaryServesHealthAndReflection(t *testing.T) {
	for svc, name := range map[string]string{
		"collector": "tidal.collector.v1.CollectorService",
		"decider":   "tidal.decider.v1.DeciderService",
		"actuator":  "tidal.actuator.v1.ActuatorService",
	} {
		t.Run(svc, func(t *testing.T) {
			p := start(t, svc)
			list := grpcurl(t, p.GRPCAddr, "list")
			for _, want := range []string{name, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
				if !strings.Contains(list, want) {
					t.Errorf("grpcurl list = %q, want it to contain %s", list, want)
				}
			}
			if out := grpcurl(t, p.GRPCAddr, "grpc.health.v1.Health/Check"); !strings.Contains(out, "SERVING") {
				t.Errorf("Health/Check = %q, want SERVING", out)
			}
		})
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	act := start(t, "actuator")
	client := actuatorv1.NewActuatorServiceClient(dial(t, act.GRPCAddr))
	target := &commonv1.TargetRef{Namespace: "default", Name: "app"}
	tests := []struct {
		name      string
		req       *actuatorv1.ScaleRequest
		wantField string
	}{
		{"empty name", &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "default"}, DesiredReplicas: 1, DecisionSequence: 1}, "target.name"},
		{"negative desired", &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: -5, DecisionSequence: 1}, "desired_replicas"},
		{"missing target", &actuatorv1.ScaleRequest{DesiredReplicas: 1, DecisionSequence: 1}, "target"},
		{"zero sequence", &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: 1}, "decision_sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Scale(context.Background(), tt.req)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("Scale code = %v (%v), want InvalidArgument", got, err)
			}
			if !strings.Contains(status.Convert(err).Message(), tt.wantField) {
				t.Errorf("Scale error %q does not name field %s", status.Convert(err).Message(), tt.wantField)
			}
		})
	}
	// The process keeps serving after refusals.
	resp, err := client.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: 2, DecisionSequence: 1})
	if err != nil || resp.GetAppliedReplicas() != 2 {
		t.Fatalf("valid Scale after refusals = %v, %v; want 2 replicas applied", resp, err)
	}

	col := start(t, "collector", "--decider-addr", testkit.FreeAddr(t))
	_, err = collectorv1.NewCollectorServiceClient(dial(t, col.GRPCAddr)).PushStats(context.Background(), &collectorv1.PushStatsRequest{
		Stats: []*collectorv1.Stat{{Target: target, PodName: "activator-1", AverageConcurrency: 1, AverageProxiedConcurrency: 2}},
	})
	if got := status.Code(err); got != codes.InvalidArgument || !strings.Contains(err.Error(), "stats[0].average_proxied_concurrency") {
		t.Errorf("PushStats with proxied > total = %v, want InvalidArgument naming stats[0].average_proxied_concurrency", err)
	}
}

// TestPushedStatReachesActuator is the whole path: an activator-style stat
// pushed to the collector is streamed to the decider, which decides and
// calls the actuator's Scale.
func TestPushedStatReachesActuator(t *testing.T) {
	act := start(t, "actuator")
	dec := start(t, "decider", "--actuator-addr", act.GRPCAddr)
	col := start(t, "collector", "--decider-addr", dec.GRPCAddr)

	target := &commonv1.TargetRef{Namespace: "default", Name: "hello"}
	collector := collectorv1.NewCollectorServiceClient(dial(t, col.GRPCAddr))
	decider := deciderv1.NewDeciderServiceClient(dial(t, dec.GRPCAddr))
	actuator := actuatorv1.NewActuatorServiceClient(dial(t, act.GRPCAddr))

	var sc *actuatorv1.GetScaleResponse
	testkit.Eventually(t, 30*time.Second, "a Scale reaching the actuator", func() bool {
		// Keep pushing, as an activator does while requests wait: the first
		// push may land before the collector's stream to the decider is up.
		_, err := collector.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: target, PodName: "activator-0", AverageConcurrency: 250, RequestCount: 250,
		}}})
		if err != nil {
			t.Fatalf("PushStats: %v", err)
		}
		if sc, err = actuator.GetScale(context.Background(), &actuatorv1.GetScaleRequest{Target: target}); err != nil {
			t.Fatalf("GetScale: %v", err)
		}
		return sc.GetLastAppliedSequence() > 0
	})
	if sc.GetReplicas() < 1 {
		t.Fatalf("actuator applied %d replicas for a target with 250 requests in flight, want at least 1", sc.GetReplicas())
	}
	d, err := decider.GetDecision(context.Background(), &deciderv1.GetDecisionRequest{Target: target})
	if err != nil {
		t.Fatalf("GetDecision: %v", err)
	}
	if got := d.GetDecision().GetSequence(); got < sc.GetLastAppliedSequence() {
		t.Errorf("decider's latest sequence %d is older than the actuator's applied %d", got, sc.GetLastAppliedSequence())
	}
	if d.GetDecision().GetReason() == "" || sc.GetLastReason() == "" {
		t.Errorf("decision reason %q, applied reason %q: want both set", d.GetDecision().GetReason(), sc.GetLastReason())
	}
}
