package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// countingDecider only counts the samples it receives.
type countingDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
	samples atomic.Int64
}

func (d *countingDecider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&deciderv1.IngestResponse{})
		}
		if err != nil {
			return err
		}
		n := 0
		for _, m := range req.GetMetrics() {
			n += len(m.GetSamples())
		}
		d.samples.Add(int64(n))
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeciderStream records scraped samples for 1,000 targets and
// streams them to a decider over loopback gRPC; one op is one sample, timed
// until the decider has received all of them. CPU covers both ends.
func BenchmarkDeciderStream(b *testing.B) {
	d := &countingDecider{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	deciderv1.RegisterDeciderServiceServer(srv, d)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	cfg := testConfig(b)
	cfg.FlushInterval = 10 * time.Millisecond
	hub := New(Config{Retention: time.Minute, HighWater: cfg.HighWater, Batch: cfg.BatchSamples}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	st := NewStreams(cfg, hub, zap.NewNop())
	st.SetDeciders([]string{ln.Addr().String()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = st.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	refs := make([]*commonv1.TargetRef, 1000)
	for i := range refs {
		refs[i] = &commonv1.TargetRef{Namespace: "bench", Name: fmt.Sprintf("svc-%04d", i)}
		hub.SetSpec(&deciderv1.TargetSpec{Target: refs[i], Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)
	}
	for !connected(hub, ln.Addr().String()) {
		time.Sleep(time.Millisecond)
	}
	ready := int32(3)
	t0 := time.Now()
	base := d.samples.Load()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		if err := hub.WaitRoom(ctx); err != nil {
			b.Fatal(err)
		}
		hub.Record(refs[i%len(refs)], &commonv1.MetricSample{
			Time:   timestamppb.New(t0.Add(time.Duration(i/len(refs)) * time.Millisecond)),
			Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1, ReadyPods: &ready,
		})
	}
	for d.samples.Load()-base < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "samples/cpu-s")
}

// BenchmarkRecord records one scraped sample per op for 10,000 targets in
// turn, each with the ref its source passes every time, as the scraper
// does at 10,000 targets; no decider streams them.
func BenchmarkRecord(b *testing.B) {
	hub := New(Config{Retention: time.Minute, HighWater: 1 << 20}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	refs := make([]*commonv1.TargetRef, 10000)
	for i := range refs {
		refs[i] = &commonv1.TargetRef{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i), ApiVersion: "apps/v1", Kind: "Deployment"}
		hub.SetSpec(&deciderv1.TargetSpec{Target: refs[i], Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)
	}
	ready := int32(3)
	t0 := time.Now()
	var s *commonv1.MetricSample
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%len(refs) == 0 { // a round a second, as the scraper's
			s = &commonv1.MetricSample{Time: timestamppb.New(t0.Add(time.Duration(i/len(refs)) * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1, ReadyPods: &ready}
		}
		if !hub.Record(refs[i%len(refs)], s) {
			b.Fatal("not recorded")
		}
	}
}
