package collectorv1

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// FuzzStatFastPath decodes any bytes as a pushed Stat: the allocation-free
// fast path must agree with the full check on every one, or PushStats
// would accept what the API documents as refused (or refuse with no error).
func FuzzStatFastPath(f *testing.F) {
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "app"}
	for _, s := range []*Stat{
		{Target: ref, PodName: "a", AverageConcurrency: 2, AverageProxiedConcurrency: 1, RequestCount: 3, ProxiedRequestCount: 3},
		{Target: ref, PodName: "a", AverageConcurrency: math.NaN(), RequestCount: math.Inf(1)},
		{Target: ref, PodName: "a", AverageConcurrency: 1e300, RequestCount: -1},
		{Target: ref, PodName: "a", AverageConcurrency: 1e9, AverageProxiedConcurrency: 1e9 + 1},
		{Target: ref, PodName: "pod\n\x1b[2J"},
		{Target: ref, PodName: "\ufffd"},
		{Target: ref, PodName: strings.Repeat("p", 254)},
		{Target: &commonv1.TargetRef{Namespace: "NS", Name: strings.Repeat("a", 64), ApiVersion: "apps/v1/x", Kind: "1K"}, PodName: "a"},
		{PodName: "a"},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Stat
		if proto.Unmarshal(b, &s) != nil {
			return
		}
		fast, full := s.valid(), s.validateField("stats[0]")
		if fast != (full == nil) {
			t.Fatalf("valid() = %v, validateField = %v, for %v", fast, full, &s)
		}
	})
}
