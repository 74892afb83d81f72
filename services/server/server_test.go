package server

import (
	"context"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestParseFlagsEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "default", want: "127.0.0.1:1"},
		{name: "env overrides default", env: map[string]string{"TIDAL_GRPC_ADDR": "0.0.0.0:7"}, want: "0.0.0.0:7"},
		{name: "flag beats env", args: []string{"--grpc-addr", "127.0.0.1:9"}, env: map[string]string{"TIDAL_GRPC_ADDR": "0.0.0.0:7"}, want: "127.0.0.1:9"},
		{name: "malformed env refused", env: map[string]string{"TIDAL_SHUTDOWN_GRACE": "soon"}, wantErr: `TIDAL_SHUTDOWN_GRACE="soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c Config
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.RegisterFlags(fs, "127.0.0.1:1", "127.0.0.1:2")
			err := ParseFlags(fs, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFlags error = %v, want it to contain %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.GRPCAddr != tt.want {
				t.Errorf("GRPCAddr = %q, want %q", c.GRPCAddr, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	base := Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: time.Second, LogLevel: "info"}
	for name, mutate := range map[string]func(*Config){
		"grpc-addr":           func(c *Config) { c.GRPCAddr = "nohost" },
		"http-addr":           func(c *Config) { c.HTTPAddr = "" },
		"shutdown-grace":      func(c *Config) { c.ShutdownGrace = -1 },
		"log-level":           func(c *Config) { c.LogLevel = "loud" },
		"max-connections":     func(c *Config) { c.Conn.MaxConnections = -1 },
		"max-connection-idle": func(c *Config) { c.Conn.MaxIdle = -time.Second },
	} {
		c := base
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--"+name) {
			t.Errorf("%s: Validate = %v, want an error naming --%s", name, err, name)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

// panicky is an ActuatorService whose Scale panics, to prove recovery.
type panicky struct {
	actuatorv1.UnimplementedActuatorServiceServer
}

func (panicky) Scale(context.Context, *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	panic("boom")
}

func TestServerChainAndShutdown(t *testing.T) {
	srv := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: time.Second, LogLevel: "debug"}, zap.NewNop(), prometheus.NewRegistry())
	actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), panicky{})
	gaddr, haddr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	get := func(path string) int {
		resp, err := http.Get("http://" + haddr.String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	conn, err := grpc.NewClient(gaddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "tidal.actuator.v1.ActuatorService"})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return resp.GetStatus()
	}

	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz before SetReady = %d, want 503", got)
	}
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before SetReady = %v, want NOT_SERVING", got)
	}
	srv.SetReady(true)
	if got := get("/readyz"); got != http.StatusOK {
		t.Errorf("/readyz after SetReady = %d, want 200", got)
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", got)
	}
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after SetReady = %v, want SERVING", got)
	}

	client := actuatorv1.NewActuatorServiceClient(conn)
	_, err = client.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "ns"}, DecisionSequence: 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "target.name") {
		t.Errorf("invalid request: %v, want InvalidArgument naming target.name (validation runs before the handler)", err)
	}
	_, err = client.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "ns", Name: "a"}, DecisionSequence: 1})
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking handler: %v, want Internal without the panic's value (it goes to the log only)", err)
	}
	if got := get("/metrics"); got != http.StatusOK {
		t.Errorf("/metrics = %d, want 200", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancel")
	}
}

// TestPprofOnlyWhenAsked checks that the profiler is off unless --pprof is
// given: the HTTP port is reachable without authentication.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Pprof: tc.pprof}, zap.NewNop(), prometheus.NewRegistry())
		_, haddr, err := srv.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		resp, err := http.Get("http://" + haddr.String() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("pprof %t: GET /debug/pprof/ = %d, want %d", tc.pprof, resp.StatusCode, tc.want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
