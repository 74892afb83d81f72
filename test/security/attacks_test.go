package security

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// TestAttacks replays each attack of issue 14 that one call makes, as the
// attacker would: against the three binaries with mutual TLS, holding the
// certificate that gets furthest. Each is refused with the code named, its
// error quotes at most a bounded prefix of what was sent, and the services
// keep serving.
func TestAttacks(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	act := actuatorv1.NewActuatorServiceClient(f.dial(t, "decider", f.actuator))
	actAsCollector := actuatorv1.NewActuatorServiceClient(f.dial(t, "collector", f.actuator))
	dec := deciderv1.NewDeciderServiceClient(f.dial(t, "collector", f.decider))
	decAsPusher := deciderv1.NewDeciderServiceClient(f.dial(t, "pusher", f.decider))
	col := collectorv1.NewCollectorServiceClient(f.dial(t, "pusher", f.collector))

	deployment := &commonv1.TargetRef{Namespace: "tenant", Name: "web", ApiVersion: "apps/v1", Kind: "Deployment"}
	huge := strings.Repeat("x", 3<<20)
	i32 := func(v int32) *int32 { return &v }
	sample := func(mut func(*commonv1.MetricSample)) *commonv1.MetricSample {
		s := &commonv1.MetricSample{Time: timestamppb.Now(), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1, ReadyPods: i32(1)}
		mut(s)
		return s
	}
	ingestResp := func(c deciderv1.DeciderServiceClient, req *deciderv1.IngestRequest) (*deciderv1.IngestResponse, error) {
		st, err := c.Ingest(ctx)
		if err != nil {
			return nil, err
		}
		req.CollectorId = "attacker"
		_ = st.Send(req) // a refusal comes with the response
		return st.CloseAndRecv()
	}
	ingest := func(c deciderv1.DeciderServiceClient, req *deciderv1.IngestRequest) error {
		_, err := ingestResp(c, req)
		return err
	}
	// A bad sample is dropped and counted, not the whole stream: the
	// collector's other targets keep flowing.
	dropped := func(v float64) func() error {
		return func() error {
			resp, err := ingestResp(dec, &deciderv1.IngestRequest{
				Specs: []*deciderv1.TargetSpec{{Target: deployment, Strategy: commonv1.Strategy_STRATEGY_KPA}},
				Metrics: []*deciderv1.TargetMetrics{{Target: deployment, Samples: []*commonv1.MetricSample{
					sample(func(*commonv1.MetricSample) {}),
					sample(func(s *commonv1.MetricSample) { s.AverageConcurrency = v }),
				}}},
			})
			if err == nil && (resp.GetDroppedSamples() != 1 || resp.GetAcceptedSamples() != 1) {
				t.Errorf("a good sample and concurrency %g: accepted %d, dropped %d; want the good one accepted and the other dropped", v, resp.GetAcceptedSamples(), resp.GetDroppedSamples())
			}
			return err
		}
	}
	annotations := map[string]string{}
	for i := range 20000 {
		annotations["autoscaling.knative.dev/x"+strconv.Itoa(i)] = "1"
	}

	tests := []struct {
		name string
		do   func() error
		want codes.Code
	}{
		{"Scale from a collector's certificate", func() error {
			_, err := actAsCollector.Scale(ctx, &actuatorv1.ScaleRequest{Target: deployment, DesiredReplicas: 100000, DecisionSequence: 1})
			return err
		}, codes.PermissionDenied},
		{"Scale with decision_sequence 2^64-1 (would freeze the target)", func() error {
			_, err := act.Scale(ctx, &actuatorv1.ScaleRequest{Target: deployment, DesiredReplicas: 3, DecisionSequence: math.MaxUint64})
			return err
		}, codes.InvalidArgument},
		{"Scale of a Pod", func() error {
			_, err := act.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "tenant", Name: "p", ApiVersion: "v1", Kind: "Pod"}, DesiredReplicas: 1, DecisionSequence: uint64(time.Now().UnixMilli())})
			return err
		}, codes.PermissionDenied},
		{"Scale to 100,000,000 replicas", func() error {
			_, err := act.Scale(ctx, &actuatorv1.ScaleRequest{Target: deployment, DesiredReplicas: 100_000_000, DecisionSequence: uint64(time.Now().UnixMilli())})
			return err
		}, codes.InvalidArgument},
		{"Ingest posing as a collector (removed: a live target)", func() error {
			return ingest(decAsPusher, &deciderv1.IngestRequest{Removed: []*commonv1.TargetRef{deployment}})
		}, codes.PermissionDenied},
		{"Ingest of concurrency 1e11 (dropped, counted)", dropped(1e11), codes.OK},
		{"Ingest of concurrency 1e300 (dropped, counted)", dropped(1e300), codes.OK},
		{"Ingest of ready_pods 2^31-1", func() error {
			return ingest(dec, &deciderv1.IngestRequest{Metrics: []*deciderv1.TargetMetrics{{Target: deployment, ReadyPods: i32(math.MaxInt32)}}})
		}, codes.InvalidArgument},
		{"Ingest of a 3 MB measure_error", func() error {
			return ingest(dec, &deciderv1.IngestRequest{Metrics: []*deciderv1.TargetMetrics{{Target: deployment, MeasureError: huge}}})
		}, codes.InvalidArgument},
		{"Ingest of 20,000 annotations", func() error {
			return ingest(dec, &deciderv1.IngestRequest{Specs: []*deciderv1.TargetSpec{{Target: deployment, Strategy: commonv1.Strategy_STRATEGY_KPA, Annotations: annotations}}})
		}, codes.InvalidArgument},
		{"Ingest with a 3 MB target name", func() error {
			return ingest(dec, &deciderv1.IngestRequest{Specs: []*deciderv1.TargetSpec{{Target: &commonv1.TargetRef{Namespace: "tenant", Name: huge}, Strategy: commonv1.Strategy_STRATEGY_KPA}}})
		}, codes.InvalidArgument},
		{"PushStats with a 3 MB target name", func() error {
			_, err := col.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{Target: &commonv1.TargetRef{Namespace: "tenant", Name: huge}, PodName: "a"}}})
			return err
		}, codes.InvalidArgument},
		{"PushStats with a pod name of terminal escapes", func() error {
			_, err := col.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{Target: deployment, PodName: "a\n\x1b[2J"}}})
			return err
		}, codes.InvalidArgument},
		{"ListDecisions asking for a million at once", func() error {
			resp, err := deciderv1.NewDeciderServiceClient(f.dial(t, "reader", f.decider)).ListDecisions(ctx, &deciderv1.ListDecisionsRequest{PageSize: 1_000_000})
			if err == nil && len(resp.GetDecisions()) > 1000 {
				t.Errorf("a page of %d decisions", len(resp.GetDecisions()))
			}
			return err
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if got := status.Code(err); got != tt.want {
				t.Fatalf("%v, want %s", err, tt.want)
			}
			if err != nil && len(err.Error()) > 1024 {
				t.Errorf("a %d-byte error; want a bounded prefix of what was sent", len(err.Error()))
			}
		})
	}

	// A reason with newlines and terminal escapes is applied without them.
	seq := uint64(time.Now().UnixMilli())
	if _, err := act.Scale(ctx, &actuatorv1.ScaleRequest{Target: deployment, DesiredReplicas: 2, DecisionSequence: seq, Reason: "ok\n\x1b[31mFAKE LOG LINE"}); err != nil {
		t.Fatalf("Scale with a reason of control characters: %v", err)
	}
	got, err := act.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: deployment})
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(got.GetLastReason(), "\n\x1b") || got.GetLastAppliedSequence() != seq {
		t.Errorf("GetScale after it: reason %q, sequence %d; want sequence %d and no control characters", got.GetLastReason(), got.GetLastAppliedSequence(), seq)
	}
	// Everything still answers.
	for _, p := range []struct {
		name string
		err  error
	}{
		{"collector", func() error { _, err := col.ListTargets(ctx, &collectorv1.ListTargetsRequest{}); return err }()},
		{"decider", func() error {
			_, err := deciderv1.NewDeciderServiceClient(f.dial(t, "reader", f.decider)).ListDecisions(ctx, &deciderv1.ListDecisionsRequest{})
			return err
		}()},
	} {
		if p.err != nil {
			t.Errorf("%s after the attacks: %v", p.name, p.err)
		}
	}
}
