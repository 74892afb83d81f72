package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/decider/keepalive"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// actuator records the Scale calls it gets over real gRPC.
type actuator struct {
	actuatorv1.UnimplementedActuatorServiceServer
	mu    sync.Mutex
	calls []*actuatorv1.ScaleRequest
}

func (a *actuator) Scale(_ context.Context, req *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, req)
	return &actuatorv1.ScaleResponse{AppliedReplicas: req.GetDesiredReplicas(), LastAppliedSequence: req.GetDecisionSequence()}, nil
}

func (a *actuator) last() *actuatorv1.ScaleRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) == 0 {
		return nil
	}
	return a.calls[len(a.calls)-1]
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startDecider runs the binary's run in-process against a recording actuator.
func startDecider(t *testing.T, args ...string) (deciderv1.DeciderServiceClient, *actuator) {
	t.Helper()
	client, act, _ := startDeciderAt(t, args...)
	return client, act
}

// startDeciderAt is startDecider that also returns the gRPC address.
func startDeciderAt(t *testing.T, args ...string) (deciderv1.DeciderServiceClient, *actuator, string) {
	t.Helper()
	act := &actuator{}
	al := listen(t)
	as := grpc.NewServer()
	actuatorv1.RegisterActuatorServiceServer(as, act)
	go func() { _ = as.Serve(al) }()
	t.Cleanup(as.Stop)

	gl, hl := listen(t), listen(t)
	gaddr, haddr := gl.Addr().String(), hl.Addr().String()
	gl.Close()
	hl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--grpc-addr", gaddr, "--http-addr", haddr, "--actuator-addr", al.Addr().String(), "--log-level", "error"}, args...), io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run after cancel: %v", err)
		}
	})
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	testkit.Eventually(t, 10*time.Second, "the decider serving", func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	return deciderv1.NewDeciderServiceClient(conn), act, gaddr
}

var hello = &commonv1.TargetRef{Namespace: "default", Name: "hello"}

func sample(at time.Time, src commonv1.SampleSource, c float64) *commonv1.MetricSample {
	ready := int32(1)
	s := &commonv1.MetricSample{Time: timestamppb.New(at), Source: src, AverageConcurrency: c, RequestCount: c}
	if src == commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE {
		s.ReadyPods = &ready
	}
	return s
}

func TestIngestDecideExplain(t *testing.T) {
	client, act := startDecider(t)
	ctx := context.Background()
	watch, err := client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	bad := sample(now, commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 1)
	bad.AverageProxiedConcurrency = 5 // more proxied than in flight: dropped, not fatal
	if err := st.Send(&deciderv1.IngestRequest{
		CollectorId: "c1",
		Specs: []*deciderv1.TargetSpec{{Target: hello, Strategy: commonv1.Strategy_STRATEGY_KPA,
			Annotations: map[string]string{"autoscaling.knative.dev/window": "6s", "autoscaling.knative.dev/max-scale": "3"}}},
		Metrics: []*deciderv1.TargetMetrics{{Target: hello, Samples: []*commonv1.MetricSample{
			sample(now.Add(-2*time.Second), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 350),
			sample(now.Add(-time.Second), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 350),
			bad,
		}}},
	}); err != nil {
		t.Fatal(err)
	}

	// A decision reaches the actuator and the watcher.
	var req *actuatorv1.ScaleRequest
	testkit.Eventually(t, 10*time.Second, "a Scale call", func() bool { req = act.last(); return req != nil })
	if req.GetDesiredReplicas() != 3 || req.GetDecisionSequence() == 0 || !strings.HasPrefix(req.GetReason(), "max-scale: 5 → 3") || req.ExcessBurstCapacity == nil {
		t.Errorf("Scale request %v: want 5 pods for 350 in flight at target 70 bounded to max-scale 3, a sequence, the reason and the EBC", req)
	}
	for {
		w, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if w.GetDecision().GetDesiredReplicas() >= 2 {
			break
		}
	}

	ex, err := client.Explain(ctx, &deciderv1.ExplainRequest{Target: hello})
	if err != nil {
		t.Fatal(err)
	}
	k := ex.GetKpa()
	if k == nil || k.GetStableWindow().AsDuration() != 6*time.Second || k.GetTarget() != 70 || k.GetReadyPods() != 1 || k.GetObservedStable() != 350 {
		t.Errorf("Explain KPA inputs = %v, want a 6 s window, target 70, 1 ready pod and the observed load", k)
	}
	if ex.GetDecision().GetReason() == "" {
		t.Error("Explain has no reason")
	}
	if c := ex.GetClamps(); len(c) == 0 || c[len(c)-1].GetName() != "max-scale" || c[len(c)-1].GetAfter() != 3 {
		t.Errorf("Explain clamps = %v, want the max-scale clamp to 3 last", c)
	}

	resp, err := st.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAcceptedSamples() != 2 || resp.GetDroppedSamples() != 1 {
		t.Errorf("Ingest = %d accepted, %d dropped; want 2 and 1", resp.GetAcceptedSamples(), resp.GetDroppedSamples())
	}
	list, err := client.ListDecisions(ctx, &deciderv1.ListDecisionsRequest{})
	if err != nil || len(list.GetDecisions()) != 1 {
		t.Errorf("ListDecisions = %v, %v; want one decision", list, err)
	}
}

func TestDeciderRefusals(t *testing.T) {
	client, _ := startDecider(t)
	ctx := context.Background()
	_, err := client.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: &commonv1.TargetRef{Namespace: "default", Name: "nobody"}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("GetDecision of an unknown target: %v, want NotFound", err)
	}
	_, err = client.Explain(ctx, &deciderv1.ExplainRequest{Target: &commonv1.TargetRef{Namespace: "default"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "target.name") {
		t.Errorf("Explain without a name: %v, want InvalidArgument naming target.name", err)
	}
	st, err := client.Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&deciderv1.IngestRequest{CollectorId: "c1", Specs: []*deciderv1.TargetSpec{{Target: hello}}})
	_, err = st.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "specs[0].strategy") {
		t.Errorf("Ingest of a spec without strategy: %v, want InvalidArgument naming specs[0].strategy", err)
	}
}

// TestKnativeConfigFromACollector: the Knative configuration a collector
// sends on its stream applies to the targets the decider holds (Explain's
// target follows config-autoscaler's), an annotation still overrides it,
// and one that does not parse changes nothing and keeps the stream.
func TestKnativeConfigFromACollector(t *testing.T) {
	client, _ := startDecider(t)
	ctx := context.Background()
	st, err := client.Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pinned := &commonv1.TargetRef{Namespace: "default", Name: "pinned"}
	send := func(r *deciderv1.IngestRequest) {
		t.Helper()
		r.CollectorId = "c1"
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&deciderv1.IngestRequest{Specs: []*deciderv1.TargetSpec{
		{Target: hello, Strategy: commonv1.Strategy_STRATEGY_KPA},
		{Target: pinned, Strategy: commonv1.Strategy_STRATEGY_KPA, Annotations: map[string]string{"autoscaling.knative.dev/target": "50"}},
	}})
	target := func(ref *commonv1.TargetRef) float64 {
		ex, err := client.Explain(ctx, &deciderv1.ExplainRequest{Target: ref})
		if err != nil {
			return -1
		}
		return ex.GetKpa().GetTarget()
	}
	waitTarget := func(ref *commonv1.TargetRef, want float64) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%s: Explain's target %v", ref.Key(), want), func() bool { return target(ref) == want })
	}
	waitTarget(hello, 70) // Knative's defaults: 100 × 70 %

	config := func(data map[string]string) *deciderv1.KnativeConfig {
		return &deciderv1.KnativeConfig{Autoscaler: &deciderv1.ConfigMapData{Data: data}}
	}
	send(&deciderv1.IngestRequest{KnativeConfig: config(map[string]string{"container-concurrency-target-default": "10"})})
	waitTarget(hello, 7)
	if got := target(pinned); got != 35 {
		t.Errorf("the annotated target's target %v, want its annotation's 50 × 70 %% = 35", got)
	}

	// Refused: nothing changes, the stream goes on.
	send(&deciderv1.IngestRequest{KnativeConfig: config(map[string]string{"container-concurrency-target-default": "20", "stable-window": "2s"})})
	send(&deciderv1.IngestRequest{Specs: []*deciderv1.TargetSpec{{Target: &commonv1.TargetRef{Namespace: "default", Name: "later"}, Strategy: commonv1.Strategy_STRATEGY_KPA}}})
	waitTarget(&commonv1.TargetRef{Namespace: "default", Name: "later"}, 7)
	if got := target(hello); got != 7 {
		t.Errorf("after an invalid configuration: target %v, want the last good 7", got)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Errorf("the stream after an invalid configuration: %v", err)
	}
}

func TestKeepAliveThroughTheService(t *testing.T) {
	client, act := startDecider(t)
	ctx := context.Background()
	// The memory a PodAutoscaler's status kept: twenty 10-minute gaps, the
	// last request 30 s ago.
	var mem keepalive.State
	last := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	for i := 20; i >= 0; i-- {
		mem.Observe(last.Add(-time.Duration(i) * 10 * time.Minute))
	}
	st, err := client.Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&deciderv1.IngestRequest{CollectorId: "c1", Specs: []*deciderv1.TargetSpec{{
		Target: hello, Strategy: commonv1.Strategy_STRATEGY_KPA, KeepAliveState: mem.Encode(),
		Annotations: map[string]string{"autoscaling.tidal.dev/keep-alive": "predictive"},
	}}}); err != nil {
		t.Fatal(err)
	}
	var req *actuatorv1.ScaleRequest
	testkit.Eventually(t, 10*time.Second, "a Scale call", func() bool { req = act.last(); return req != nil })
	if req.GetDesiredReplicas() != 0 || !req.GetPredictedIdle() || req.GetKeepAliveState() != mem.Encode() {
		t.Errorf("Scale request %v: want a predicted 0 with the memory", req)
	}
	ex, err := client.Explain(ctx, &deciderv1.ExplainRequest{Target: hello})
	if err != nil {
		t.Fatal(err)
	}
	ka := ex.GetKeepAlive()
	if ka.GetPhase() != "unloaded" || ka.GetSamples() != 20 || ka.GetPreWarm().AsDuration() != 9*time.Minute || ka.GetUntil().AsDuration() != 12*time.Minute+6*time.Second ||
		!ka.GetLastActiveTime().AsTime().Equal(last) || ka.GetFallback() != "" || !ka.GetPredictedIdle() {
		t.Errorf("Explain keep_alive = %v, want unloaded, 20 idle times, window 9m to 12m6s from the last request", ka)
	}
	if r := ex.GetDecision().GetReason(); !strings.HasPrefix(r, "keep-alive: zero, pre-warm at 9m") {
		t.Errorf("reason %q, want the policy's", r)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

// TestRemovedThenAddedInOneBatch: a collector whose target went and came
// back between two batches sends it in both removed and specs; the decider
// forgets the old one and keeps the new, as the collector does.
func TestRemovedThenAddedInOneBatch(t *testing.T) {
	client, _ := startDecider(t)
	ctx := context.Background()
	st, err := client.Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &deciderv1.TargetSpec{Target: hello, Strategy: commonv1.Strategy_STRATEGY_KPA}
	now := time.Now()
	for _, req := range []*deciderv1.IngestRequest{
		{CollectorId: "c1", Specs: []*deciderv1.TargetSpec{spec}},
		{CollectorId: "c1", Removed: []*commonv1.TargetRef{hello}, Specs: []*deciderv1.TargetSpec{spec},
			Metrics: []*deciderv1.TargetMetrics{{Target: hello, Samples: []*commonv1.MetricSample{sample(now, commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 3)}}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAcceptedSamples() != 1 {
		t.Errorf("Ingest accepted %d samples, want the re-added target's 1", resp.GetAcceptedSamples())
	}
	if _, err := client.Explain(ctx, &deciderv1.ExplainRequest{Target: hello}); err != nil {
		t.Errorf("Explain of the re-added target: %v, want it known", err)
	}
}
