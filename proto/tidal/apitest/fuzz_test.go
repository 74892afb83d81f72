package apitest

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// requestTypes lists the input type of every RPC of every service, sorted
// by name, so a fuzz input's first byte picks one the same way every run.
func requestTypes(tb testing.TB) []protoreflect.MessageType {
	tb.Helper()
	var out []protoreflect.MessageType
	for _, fd := range []protoreflect.FileDescriptor{
		actuatorv1.File_tidal_actuator_v1_actuator_service_proto,
		collectorv1.File_tidal_collector_v1_collector_service_proto,
		// What one collector replica forwards to another: a KEDA trigger's
		// metadata as a tenant wrote it, activator stats as any pod sent them.
		collectorv1.File_tidal_collector_v1_keda_target_service_proto,
		collectorv1.File_tidal_collector_v1_activator_stat_service_proto,
		deciderv1.File_tidal_decider_v1_decider_service_proto,
	} {
		for i := 0; i < fd.Services().Len(); i++ {
			methods := fd.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				mt, err := protoregistry.GlobalTypes.FindMessageByName(methods.Get(j).Input().FullName())
				if err != nil {
					tb.Fatal(err)
				}
				out = append(out, mt)
			}
		}
	}
	slices.SortFunc(out, func(a, b protoreflect.MessageType) int {
		return strings.Compare(string(a.Descriptor().FullName()), string(b.Descriptor().FullName()))
	})
	return slices.CompactFunc(out, func(a, b protoreflect.MessageType) bool { return a.Descriptor() == b.Descriptor() })
}

// seedRequests are realistic requests of every service, valid and not,
// with the hostile values the table tests use.
func seedRequests() []proto.Message {
	ref := &commonv1.TargetRef{Namespace: "default", Name: "hello-00001-deployment", ApiVersion: "apps/v1", Kind: "Deployment"}
	long := strings.Repeat("a", 5000)
	ctl := "a\n\x1b[2J\x00"
	i32 := func(v int32) *int32 { return &v }
	f64 := func(v float64) *float64 { return &v }
	stat := func(c, pc, rc, prc float64) *collectorv1.Stat {
		return &collectorv1.Stat{Target: ref, PodName: "hello-abc", AverageConcurrency: c, AverageProxiedConcurrency: pc, RequestCount: rc, ProxiedRequestCount: prc}
	}
	spec := &actuatorv1.FunctionSpec{Image: "example/square:1", InputTopic: "numbers", Brokers: "k1:9092,k2:9092", MaxReplicas: 4,
		IdleTimeout: durationpb.New(1e10), Env: map[string]string{"MODE": "fast"}}
	fn := &actuatorv1.FunctionRef{Namespace: "default", Name: "square"}
	return []proto.Message{
		&actuatorv1.ScaleRequest{Target: ref, DesiredReplicas: 3, DecisionSequence: 7, Reason: "stable: 5 → 3", ExcessBurstCapacity: f64(-20)},
		&actuatorv1.ScaleRequest{Target: ref, DesiredReplicas: -1, DecisionSequence: 0, Reason: long, ExcessBurstCapacity: f64(math.NaN())},
		&actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: ctl, Name: long}, DesiredReplicas: math.MaxInt32},
		&actuatorv1.GetScaleRequest{Target: &commonv1.TargetRef{Namespace: "ns", Name: "a", Kind: strings.Repeat("K", 64), ApiVersion: "apps/v1/x"}},
		&actuatorv1.DeployRequest{Function: fn, Spec: spec},
		&actuatorv1.DeployRequest{Function: fn, Spec: &actuatorv1.FunctionSpec{Image: "a b", InputTopic: "..", Brokers: "k1", MaxReplicas: -1,
			IdleTimeout: &durationpb.Duration{Seconds: math.MaxInt64}, Env: map[string]string{ctl: long}}},
		&actuatorv1.UndeployRequest{Function: &actuatorv1.FunctionRef{Namespace: "Default", Name: ""}},
		&actuatorv1.UpdateRequest{Function: fn, Spec: spec, Replicas: i32(2)},
		&actuatorv1.UpdateRequest{Function: fn, Spec: &actuatorv1.FunctionSpec{Image: "i", InputTopic: long, OutputTopic: ctl, Brokers: ":9092"}, Replicas: i32(1e6)},
		&collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{stat(3, 1, 4, 2), stat(0, 0, 0, 0)}},
		&collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{stat(math.NaN(), 0, math.Inf(1), 0), stat(1e300, 2e300, -1, 0), {Target: ref, PodName: ctl}}},
		&collectorv1.PushStatsStreamRequest{Stats: []*collectorv1.Stat{stat(1, 2, 3, 4), nil}},
		&collectorv1.ListTargetsRequest{Namespace: "default", PageSize: 10, PageToken: commonv1.PageToken("default/a")},
		&collectorv1.ListTargetsRequest{Namespace: long, PageSize: -1, PageToken: "!!"},
		&collectorv1.GetWindowRequest{Target: ref},
		&deciderv1.IngestRequest{CollectorId: "collector-0",
			Specs: []*deciderv1.TargetSpec{{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA, ContainerConcurrency: 10,
				Annotations: map[string]string{"autoscaling.knative.dev/target": "10", "lag.tidal.dev/partitionLimitation": "0-999999999"}}},
			Metrics: []*deciderv1.TargetMetrics{{Target: ref, ReadyPods: i32(2), MeasureError: "scrape: timeout"}},
			Removed: []*commonv1.TargetRef{ref}},
		&deciderv1.IngestRequest{CollectorId: long,
			Specs:   []*deciderv1.TargetSpec{{Target: ref, Strategy: 9, ContainerConcurrency: -1, Reachability: 7, Annotations: map[string]string{ctl: long}}},
			Metrics: []*deciderv1.TargetMetrics{{Target: ref, ReadyPods: i32(-1), MeasureError: strings.Repeat(ctl, 5000)}}},
		&deciderv1.GetDecisionRequest{Target: ref},
		&deciderv1.ListDecisionsRequest{Namespace: "default", PageSize: 1000},
		&deciderv1.WatchDecisionsRequest{Namespace: ctl},
		&deciderv1.ExplainRequest{},
		&collectorv1.EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: map[string]string{
			"bootstrapServers": "kafka-0.kafka.svc:9092", "consumerGroup": "billing", "topic": "invoices", "lagThreshold": "10"}},
		&collectorv1.EnsureKEDATargetRequest{Namespace: ctl, Name: long, ScalerMetadata: map[string]string{ctl: long, "bootstrapServers": "169.254.169.254:80"}},
		&collectorv1.ForwardActivatorStatsRequest{ArrivalTime: timestamppb.Now(), Stats: []*collectorv1.Stat{stat(3, 1, 4, 2)}},
		&collectorv1.ForwardActivatorStatsRequest{Stats: []*collectorv1.Stat{stat(math.NaN(), -1, math.Inf(1), 1e300), {Target: &commonv1.TargetRef{Namespace: ctl, Name: long}, PodName: ctl}, nil}},
	}
}

// FuzzValidate decodes any bytes as the request of any RPC (the first
// argument picks which) and runs the Validate the validation interceptor
// calls. A refusal is a *commonv1.FieldError naming a field of the request
// in a short line of UTF-8 text without control characters; the same
// request gets the same answer twice; and an accepted request stays
// accepted after a Marshal/Unmarshal round trip.
func FuzzValidate(f *testing.F) {
	types := requestTypes(f)
	for _, m := range seedRequests() {
		i := slices.IndexFunc(types, func(mt protoreflect.MessageType) bool { return mt.Descriptor() == m.ProtoReflect().Descriptor() })
		if i < 0 {
			f.Fatalf("seed %T is no RPC's request", m)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	for i := range types {
		f.Add(uint8(i), []byte{}) // every type's empty request
	}
	f.Fuzz(func(t *testing.T, pick uint8, b []byte) {
		mt := types[int(pick)%len(types)]
		req := mt.New().Interface()
		if proto.Unmarshal(b, req) != nil {
			return
		}
		name := mt.Descriptor().Name()
		err := req.(validator).Validate()
		if again := req.(validator).Validate(); (err == nil) != (again == nil) || err != nil && err.Error() != again.Error() {
			t.Fatalf("%s: Validate = %v, then %v", name, err, again)
		}
		if err != nil {
			checkRefusal(t, mt.Descriptor(), err)
			return
		}
		out, err := proto.Marshal(req)
		if err != nil {
			t.Fatalf("%s: Marshal of an accepted request: %v", name, err)
		}
		req2 := mt.New().Interface()
		if err := proto.Unmarshal(out, req2); err != nil || !proto.Equal(req, req2) {
			t.Fatalf("%s: round trip: %v, equal %v", name, err, proto.Equal(req, req2))
		}
		if err := req2.(validator).Validate(); err != nil {
			t.Fatalf("%s: accepted request refused after a round trip: %v", name, err)
		}
	})
}

// checkRefusal asserts an error is a bounded FieldError whose path starts
// with a field of the request.
func checkRefusal(t *testing.T, md protoreflect.MessageDescriptor, err error) {
	t.Helper()
	msg := err.Error()
	if len(msg) >= 1024 || !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) {
		t.Fatalf("%s: error of %d bytes, want a short line of UTF-8 text: %.300q", md.Name(), len(msg), msg)
	}
	var fe *commonv1.FieldError
	if !errors.As(err, &fe) || !strings.HasPrefix(msg, "invalid "+fe.Field+" ") {
		t.Fatalf("%s: error %q is not a FieldError naming its field", md.Name(), msg)
	}
	top := fe.Field
	if i := strings.IndexAny(top, ".["); i >= 0 {
		top = top[:i]
	}
	if md.Fields().ByName(protoreflect.Name(top)) == nil {
		t.Fatalf("%s: error %q names %q, which is no field of the request", md.Name(), msg, fe.Field)
	}
}
