package collectorv1

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestForwardActivatorStatsRequestValidate(t *testing.T) {
	at := timestamppb.New(time.Unix(1700000000, 0))
	stat := &Stat{Target: &commonv1.TargetRef{Namespace: "shop", Name: "cart-00001-deployment"}, PodName: "activator-1", AverageConcurrency: 1, RequestCount: 1}
	tests := []struct {
		name string
		req  *ForwardActivatorStatsRequest
		want string // a part of the error; empty: valid
	}{
		{"valid", &ForwardActivatorStatsRequest{ArrivalTime: at, Stats: []*Stat{stat}}, ""},
		{"no arrival time", &ForwardActivatorStatsRequest{Stats: []*Stat{stat}}, "arrival_time"},
		{"an invalid arrival time", &ForwardActivatorStatsRequest{ArrivalTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}, Stats: []*Stat{stat}}, "arrival_time"},
		{"no stats", &ForwardActivatorStatsRequest{ArrivalTime: at}, "stats"},
		{"a bad stat", &ForwardActivatorStatsRequest{ArrivalTime: at, Stats: []*Stat{stat, {Target: stat.Target, PodName: "activator-1", AverageConcurrency: -1}}}, "stats[1].average_concurrency"},
		{"a long pod name", &ForwardActivatorStatsRequest{ArrivalTime: at, Stats: []*Stat{{Target: stat.Target, PodName: strings.Repeat("p", 1000)}}}, "stats[0].pod_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
			case err != nil && len(err.Error()) > 300:
				t.Errorf("error of %d bytes: want a bounded quote", len(err.Error()))
			}
		})
	}
}
