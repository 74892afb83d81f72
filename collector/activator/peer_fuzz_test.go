package activator

import (
	"context"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// FuzzForwardActivatorStats: any bytes as a forward from another replica,
// the stats any pod sent that replica, through the validation the
// interceptor chain runs and into the owner's real hub, with targets
// implicit (the most a stat can do) and a bound of a few targets. Every
// stat is accounted for once (recorded, not owned or unknown); an answer
// is short UTF-8 text; the hub never holds more targets than its bound.
func FuzzForwardActivatorStats(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	ref := func(ns, name string) *commonv1.TargetRef { return &commonv1.TargetRef{Namespace: ns, Name: name} }
	for _, req := range []*collectorv1.ForwardActivatorStatsRequest{
		{ArrivalTime: timestamppb.New(now), Stats: []*collectorv1.Stat{{Target: ref("default", "hello-00001"), PodName: "activator-0", AverageConcurrency: 3, RequestCount: 4}}},
		{ArrivalTime: timestamppb.New(now.Add(-time.Hour)), Stats: []*collectorv1.Stat{{Target: ref("default", "a")}}},
		{ArrivalTime: timestamppb.New(now), Stats: []*collectorv1.Stat{{Target: ref("a", "x")}, {Target: ref("b", "y")}, {Target: ref("c", "z")}, {Target: ref("d", "w")}, {Target: ref("e", "v")}}},
		{ArrivalTime: timestamppb.New(now), Stats: []*collectorv1.Stat{{Target: ref("default", "a\n\x1b"), PodName: "\x00", AverageConcurrency: 1e300}}},
		{},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req collectorv1.ForwardActivatorStatsRequest
		if proto.Unmarshal(b, &req) != nil || req.Validate() != nil {
			return
		}
		reg := prometheus.NewRegistry()
		const maxTargets = 3
		hub := dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 20, MaxTargets: maxTargets}, dispatch.NewMetrics(reg), zap.NewNop())
		owners := func(r *commonv1.TargetRef) (string, bool) { return "10.0.0.2:9001", r.GetNamespace() != "elsewhere" }
		p := NewPeerService(owners, HubRecorder{Hub: hub, Implicit: true, Wait: time.Millisecond}, NewMetrics(reg), func() time.Time { return now })
		resp, err := p.ForwardActivatorStats(context.Background(), &req)
		if err != nil {
			st, ok := status.FromError(err)
			if !ok || len(st.Message()) > 1024 || !utf8.ValidString(st.Message()) {
				t.Fatalf("answer %v: want a status with a short UTF-8 message", err)
			}
			return
		}
		if n := int(resp.GetRecorded() + resp.GetNotOwned() + resp.GetUnknown()); n != len(req.GetStats()) {
			t.Fatalf("%d stats, %d accounted for (%v)", len(req.GetStats()), n, resp)
		}
		if got := len(hub.Targets("")); got > maxTargets {
			t.Fatalf("the hub holds %d targets, over its bound %d", got, maxTargets)
		}
	})
}
