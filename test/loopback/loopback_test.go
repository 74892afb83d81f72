// Package loopback runs the three tidal binaries as separate processes on
// loopback and checks the path from a pushed stat to a Scale call, the
// health and reflection services, and request validation.
package loopback

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
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
		for _, svc := range []string{"collector", "decider", "actuator"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "tidal-"+svc), "../../services/"+svc)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n", svc, err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type proc struct {
	name     string
	grpcAddr string
	httpAddr string
	cmd      *exec.Cmd
	log      *strings.Builder
}

// start runs one binary with free ports and waits until its health service
// says SERVING; the process is stopped with SIGTERM at cleanup.
func start(t *testing.T, svc string, args ...string) *proc {
	t.Helper()
	p := &proc{name: svc, grpcAddr: freeAddr(t), httpAddr: freeAddr(t), log: &strings.Builder{}}
	args = append([]string{"--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--log-level", "debug"}, args...)
	p.cmd = exec.Command(filepath.Join(binDir, "tidal-"+svc), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", svc, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGINT; log:\n%s", svc, err, p.log)
			}
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 15s of SIGINT", svc)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", svc, p.log)
		}
	})
	conn := dial(t, p.grpcAddr)
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not SERVING after 20s (last: %v, %v); log:\n%s", svc, resp.GetStatus(), err, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
			list := grpcurl(t, p.grpcAddr, "list")
			for _, want := range []string{name, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
				if !strings.Contains(list, want) {
					t.Errorf("grpcurl list = %q, want it to contain %s", list, want)
				}
			}
			if out := grpcurl(t, p.grpcAddr, "grpc.health.v1.Health/Check"); !strings.Contains(out, "SERVING") {
				t.Errorf("Health/Check = %q, want SERVING", out)
			}
		})
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	act := start(t, "actuator")
	client := actuatorv1.NewActuatorServiceClient(dial(t, act.grpcAddr))
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

	col := start(t, "collector", "--decider-addr", freeAddr(t))
	_, err = collectorv1.NewCollectorServiceClient(dial(t, col.grpcAddr)).PushStats(context.Background(), &collectorv1.PushStatsRequest{
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
	dec := start(t, "decider", "--actuator-addr", act.grpcAddr)
	col := start(t, "collector", "--decider-addr", dec.grpcAddr)

	target := &commonv1.TargetRef{Namespace: "default", Name: "hello"}
	collector := collectorv1.NewCollectorServiceClient(dial(t, col.grpcAddr))
	decider := deciderv1.NewDeciderServiceClient(dial(t, dec.grpcAddr))
	actuator := actuatorv1.NewActuatorServiceClient(dial(t, act.grpcAddr))

	deadline := time.Now().Add(30 * time.Second)
	for {
		// Keep pushing, as an activator does while requests wait: the first
		// push may land before the collector's stream to the decider is up.
		_, err := collector.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: target, PodName: "activator-0", AverageConcurrency: 250, RequestCount: 250,
		}}})
		if err != nil {
			t.Fatalf("PushStats: %v", err)
		}
		sc, err := actuator.GetScale(context.Background(), &actuatorv1.GetScaleRequest{Target: target})
		if err != nil {
			t.Fatalf("GetScale: %v", err)
		}
		if sc.GetLastAppliedSequence() > 0 {
			if sc.GetReplicas() < 1 {
				t.Fatalf("actuator applied %d replicas for a target with 250 requests in flight, want at least 1", sc.GetReplicas())
			}
			dec, err := decider.GetDecision(context.Background(), &deciderv1.GetDecisionRequest{Target: target})
			if err != nil {
				t.Fatalf("GetDecision: %v", err)
			}
			if got := dec.GetDecision().GetSequence(); got < sc.GetLastAppliedSequence() {
				t.Errorf("decider's latest sequence %d is older than the actuator's applied %d", got, sc.GetLastAppliedSequence())
			}
			if dec.GetDecision().GetReason() == "" || sc.GetLastReason() == "" {
				t.Errorf("decision reason %q, applied reason %q: want both set", dec.GetDecision().GetReason(), sc.GetLastReason())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Scale reached the actuator within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
