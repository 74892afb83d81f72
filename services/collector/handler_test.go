package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/services/server"
)

type fixture struct {
	hub    *dispatch.Hub
	client collectorv1.CollectorServiceClient
	now    atomic.Pointer[time.Time]
}

// startHandler serves the handler through the shared server (interceptor
// chain included) on loopback.
func startHandler(t testing.TB, implicit bool, owner ownerOf) *fixture {
	t.Helper()
	f := &fixture{}
	start := time.Unix(1_800_000_000, 0).Add(300 * time.Millisecond)
	f.now.Store(&start)
	reg := prometheus.NewRegistry()
	log := zap.NewNop()
	f.hub = dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 20}, dispatch.NewMetrics(reg), log)
	h := newHandler(f.hub, implicit, nil, owner, func() time.Time { return *f.now.Load() }, reg)
	var cfg server.Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.PanicOnError), "127.0.0.1:0", "127.0.0.1:0")
	cfg.LogLevel = "error"
	srv := server.New(cfg, log, reg)
	collectorv1.RegisterCollectorServiceServer(srv.GRPC(), h)
	addr, _, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv.SetReady(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); cancel(); <-done })
	f.client = collectorv1.NewCollectorServiceClient(conn)
	return f
}

func ref(name string) *commonv1.TargetRef { return &commonv1.TargetRef{Namespace: "ns", Name: name} }

func (f *fixture) known(names ...string) {
	for _, n := range names {
		f.hub.SetSpec(&deciderv1.TargetSpec{Target: ref(n), Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)
	}
}

func stat(name string, c float64) *collectorv1.Stat {
	return &collectorv1.Stat{Target: ref(name), PodName: "activator-0", AverageConcurrency: c, RequestCount: c}
}

func TestPushStatsRecordsWithArrivalSecond(t *testing.T) {
	f := startHandler(t, false, nil)
	f.known("a", "b")
	resp, err := f.client.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{stat("a", 1), stat("b", 2), stat("a", 3)}})
	if err != nil || resp.GetAccepted() != 3 {
		t.Fatalf("PushStats = %v, %v", resp, err)
	}
	w, err := f.client.GetWindow(context.Background(), &collectorv1.GetWindowRequest{Target: ref("a")})
	if err != nil {
		t.Fatal(err)
	}
	// Two stats for a in one second are one sample of their sum, stamped
	// with the arrival second.
	if len(w.GetSamples()) != 1 || w.GetSamples()[0].GetAverageConcurrency() != 4 {
		t.Fatalf("window of a = %v, want one sample of 4", w.GetSamples())
	}
	s := w.GetSamples()[0]
	if got := s.GetTime().AsTime(); !got.Equal(time.Unix(1_800_000_000, 0)) || s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		t.Errorf("sample time %v source %v, want the arrival second and PUSH", got, s.GetSource())
	}
	if w.GetRetention().AsDuration() != time.Minute {
		t.Errorf("retention %v", w.GetRetention())
	}
}

func TestPushStatsBadInput(t *testing.T) {
	f := startHandler(t, false, nil)
	f.known("a")
	tests := []struct {
		name  string
		stats []*collectorv1.Stat
		code  codes.Code
		want  string
	}{
		{"unknown target", []*collectorv1.Stat{stat("a", 1), stat("ghost", 1)}, codes.NotFound, `stats[1].target "ns/ghost"`},
		{"NaN", []*collectorv1.Stat{stat("a", math.NaN())}, codes.InvalidArgument, "stats[0].average_concurrency"},
		{"negative", []*collectorv1.Stat{stat("a", -1)}, codes.InvalidArgument, "stats[0].average_concurrency"},
		{"no pod name", []*collectorv1.Stat{{Target: ref("a"), AverageConcurrency: 1}}, codes.InvalidArgument, "stats[0].pod_name"},
		{"empty", nil, codes.InvalidArgument, "stats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.client.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: tt.stats})
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("PushStats = %v, want %s naming %s", err, tt.code, tt.want)
			}
		})
	}
	// Nothing of a refused call was recorded, not even its good stats.
	w, err := f.client.GetWindow(context.Background(), &collectorv1.GetWindowRequest{Target: ref("a")})
	if err != nil || len(w.GetSamples()) != 0 {
		t.Errorf("window of a after refused calls = %v, %v; want empty", w.GetSamples(), err)
	}
	// A stream ends at its first bad message, keeping what came before.
	st, err := f.client.PushStatsStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&collectorv1.PushStatsStreamRequest{Stats: []*collectorv1.Stat{stat("a", 1)}})
	_ = st.Send(&collectorv1.PushStatsStreamRequest{Stats: []*collectorv1.Stat{stat("ghost", 1)}})
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.NotFound {
		t.Errorf("stream with an unknown target ended with %v, want NotFound", err)
	}
	if w, _ := f.client.GetWindow(context.Background(), &collectorv1.GetWindowRequest{Target: ref("a")}); len(w.GetSamples()) != 1 {
		t.Errorf("window after the stream = %v, want the first message's sample", w.GetSamples())
	}
}

func TestPushStatsImplicitTargets(t *testing.T) {
	f := startHandler(t, true, nil)
	if _, err := f.client.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{stat("new", 1)}}); err != nil {
		t.Fatal(err)
	}
	w, ok := f.hub.Get(ref("new"))
	if !ok || w.Spec.GetStrategy() != commonv1.Strategy_STRATEGY_KPA {
		t.Fatalf("push mode: target %v, %v; want a KPA target", w.Spec, ok)
	}
	lt, err := f.client.ListTargets(context.Background(), &collectorv1.ListTargetsRequest{})
	if err != nil || len(lt.GetTargets()) != 1 || lt.GetTargets()[0].GetReadyPods() != -1 {
		t.Errorf("ListTargets = %v, %v; want one target with unknown ready pods", lt, err)
	}
}

func TestPushStatsNotOwner(t *testing.T) {
	f := startHandler(t, false, func(r *commonv1.TargetRef) (string, bool) {
		return "10.0.0.7:9001", r.GetName() != "elsewhere"
	})
	f.known("a", "elsewhere")
	_, err := f.client.PushStats(context.Background(), &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{stat("a", 1), stat("elsewhere", 1)}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "10.0.0.7:9001") || !strings.Contains(err.Error(), "stats[1].target") {
		t.Fatalf("PushStats = %v, want FailedPrecondition naming the owner and stats[1].target", err)
	}
}

func TestGetWindowShowsErrors(t *testing.T) {
	f := startHandler(t, false, nil)
	f.known("k")
	f.hub.SetError(ref("k"), "broker: kafka unreachable")
	f.hub.Failed(ref("k"), dispatch.Failure{Time: time.Unix(1, 0), Pod: "p-1", Reason: "timeout", Message: "no answer in 3s"})
	w, err := f.client.GetWindow(context.Background(), &collectorv1.GetWindowRequest{Target: ref("k")})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.GetErrors()) != 2 || w.GetErrors()[0].GetReason() != "broker" || w.GetErrors()[1].GetPodName() != "p-1" {
		t.Errorf("errors = %v, want the error state then the pod failure", w.GetErrors())
	}
	if _, err := f.client.GetWindow(context.Background(), &collectorv1.GetWindowRequest{Target: ref("nope")}); status.Code(err) != codes.NotFound {
		t.Errorf("GetWindow of an unknown target = %v, want NotFound", err)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPushStatsStream streams activator stats through PushStatsStream
// over loopback gRPC, interceptors included, messages of 1,000 stats over
// 1,000 targets. CPU is the whole process: client marshalling, server
// unmarshalling, validation and recording.
func BenchmarkPushStatsStream(b *testing.B) {
	for _, perMsg := range []int{100, 1000} {
		b.Run(fmt.Sprintf("stats-per-message=%d", perMsg), func(b *testing.B) {
			f := startHandler(b, false, nil)
			names := make([]string, 1000)
			for i := range names {
				names[i] = fmt.Sprintf("svc-%04d", i)
			}
			f.known(names...)
			msg := &collectorv1.PushStatsStreamRequest{}
			for i := range perMsg {
				msg.Stats = append(msg.Stats, &collectorv1.Stat{Target: ref(names[i%len(names)]), PodName: "activator-0", AverageConcurrency: 1, RequestCount: 1})
			}
			st, err := f.client.PushStatsStream(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			sec := time.Unix(1_800_000_000, 0)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				if i%1000 == 0 { // a new second now and then, as in life
					sec = sec.Add(time.Second)
					f.now.Store(&sec)
				}
				if err := st.Send(msg); err != nil {
					b.Fatal(err)
				}
			}
			resp, err := st.CloseAndRecv()
			cpu := cpuTime() - cpu0
			b.StopTimer()
			if err != nil || resp.GetAccepted() != int64(b.N*perMsg) {
				b.Fatalf("accepted %d of %d: %v", resp.GetAccepted(), b.N*perMsg, err)
			}
			n := float64(b.N * perMsg)
			b.ReportMetric(n/b.Elapsed().Seconds(), "stats/s")
			b.ReportMetric(n/cpu.Seconds(), "stats/cpu-s")
		})
	}
}

var _ = timestamppb.Now
