package collectorv1

import (
	"math"
	"strings"
	"testing"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// The fast path must agree with the full check on every stat.
func TestStatFastPathAgrees(t *testing.T) {
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "app"}
	cases := []*Stat{
		nil,
		{Target: ref, PodName: "a", AverageConcurrency: 2, AverageProxiedConcurrency: 1, RequestCount: 3, ProxiedRequestCount: 3},
		{Target: ref, PodName: "", AverageConcurrency: 1},
		{Target: ref, PodName: "a", AverageConcurrency: math.NaN()},
		{Target: ref, PodName: "a", AverageConcurrency: math.Inf(1)},
		{Target: ref, PodName: "a", RequestCount: -1},
		{Target: ref, PodName: "a", AverageConcurrency: 1, AverageProxiedConcurrency: 2},
		{Target: ref, PodName: "a", RequestCount: 1, ProxiedRequestCount: 2},
		{Target: &commonv1.TargetRef{Namespace: "NS", Name: "app"}, PodName: "a"},
		{Target: &commonv1.TargetRef{Namespace: "ns", Name: "a..b"}, PodName: "a"},
		{PodName: "a"},
		{Target: ref, PodName: "a", AverageConcurrency: 1e300},
		{Target: ref, PodName: "a", AverageConcurrency: commonv1.MaxCount, RequestCount: commonv1.MaxCount},
		{Target: ref, PodName: "a", RequestCount: commonv1.MaxCount * 2},
		{Target: ref, PodName: "a\nforged log line"},
		{Target: ref, PodName: "activator-ü"},
		{Target: &commonv1.TargetRef{Namespace: "ns", Name: "app", Kind: "Pod\n"}, PodName: "a"},
		{Target: &commonv1.TargetRef{Namespace: "ns", Name: "app", ApiVersion: "apps/v1", Kind: "StatefulSet"}, PodName: "a"},
		{Target: &commonv1.TargetRef{Namespace: "ns", Name: "app", ApiVersion: "a b/v1"}, PodName: "a"},
	}
	for i, s := range cases {
		fast := s.valid()
		full := s.validateField("s") == nil
		if fast != full {
			t.Errorf("case %d: valid() = %v, validateField ok = %v", i, fast, full)
		}
	}
}

func TestPushStatsBounds(t *testing.T) {
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "app"}
	tests := []struct {
		name  string
		stat  *Stat
		field string
	}{
		{"concurrency 1e300", &Stat{Target: ref, PodName: "a", AverageConcurrency: 1e300}, "stats[0].average_concurrency"},
		{"requests above 1e9", &Stat{Target: ref, PodName: "a", RequestCount: 2e9}, "stats[0].request_count"},
		{"a pod name with a line break", &Stat{Target: ref, PodName: "a\n{\"level\":\"error\"}"}, "stats[0].pod_name"},
		{"a 3 MB pod name", &Stat{Target: ref, PodName: strings.Repeat("p", 3<<20)}, "stats[0].pod_name"},
		{"a 3 MB target name", &Stat{Target: &commonv1.TargetRef{Namespace: "ns", Name: strings.Repeat("a", 3<<20)}, PodName: "a"}, "stats[0].target.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&PushStatsRequest{Stats: []*Stat{tt.stat}}).Validate()
			if err == nil || !strings.Contains(err.Error(), "invalid "+tt.field+" ") || len(err.Error()) > 300 {
				t.Errorf("Validate = %.300v, want a short error naming %s", err, tt.field)
			}
		})
	}
}
