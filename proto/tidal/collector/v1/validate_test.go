package collectorv1

import (
	"math"
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
	}
	for i, s := range cases {
		fast := s.valid()
		full := s.validateField("s") == nil
		if fast != full {
			t.Errorf("case %d: valid() = %v, validateField ok = %v", i, fast, full)
		}
	}
}
