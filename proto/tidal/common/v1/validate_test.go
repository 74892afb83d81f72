package commonv1

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestSampleValidation(t *testing.T) {
	now := time.Unix(1700000000, 0)
	good := func() *MetricSample {
		return &MetricSample{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 3, RequestCount: 4}
	}
	i64 := func(v int64) *int64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name   string
		mutate func(*MetricSample)
		field  string
	}{
		{"no time", func(s *MetricSample) { s.Time = nil }, "s.time"},
		{"far future", func(s *MetricSample) { s.Time = timestamppb.New(now.Add(2 * time.Hour)) }, "s.time"},
		{"far past", func(s *MetricSample) { s.Time = timestamppb.New(now.Add(-2 * time.Hour)) }, "s.time"},
		{"no source", func(s *MetricSample) { s.Source = 0 }, "s.source"},
		{"NaN concurrency", func(s *MetricSample) { s.AverageConcurrency = math.NaN() }, "s.average_concurrency"},
		{"+Inf concurrency", func(s *MetricSample) { s.AverageConcurrency = math.Inf(1) }, "s.average_concurrency"},
		{"negative requests", func(s *MetricSample) { s.RequestCount = -1 }, "s.request_count"},
		{"proxied above total", func(s *MetricSample) { s.AverageProxiedConcurrency = 4 }, "s.average_proxied_concurrency"},
		{"negative ready", func(s *MetricSample) { s.ReadyPods = i32(-1) }, "s.ready_pods"},
		{"ready pods 2^31-1", func(s *MetricSample) { s.ReadyPods = i32(math.MaxInt32) }, "s.ready_pods"},
		{"concurrency 1e300", func(s *MetricSample) { s.AverageConcurrency = 1e300 }, "s.average_concurrency"},
		{"requests above 1e9", func(s *MetricSample) { s.RequestCount = 1e9 + 1 }, "s.request_count"},
		{"too many partitions", func(s *MetricSample) {
			for p := range MaxPartitionLags + 1 {
				s.PartitionLags = append(s.PartitionLags, &PartitionLag{Partition: int32(p)})
			}
		}, "s.partition_lags"},
		{"negative partition", func(s *MetricSample) { s.PartitionLags = []*PartitionLag{{Partition: -1}} }, "s.partition_lags[0].partition"},
		{"partition twice", func(s *MetricSample) { s.PartitionLags = []*PartitionLag{{Partition: 1}, {Partition: 1}} }, "s.partition_lags[1].partition"},
		{"negative end", func(s *MetricSample) { s.PartitionLags = []*PartitionLag{{EndOffset: -2}} }, "s.partition_lags[0].end_offset"},
		{"negative commit", func(s *MetricSample) { s.PartitionLags = []*PartitionLag{{CommittedOffset: i64(-1)}} }, "s.partition_lags[0].committed_offset"},
		{"PODS without a count", func(s *MetricSample) {
			s.Source, s.AverageConcurrency, s.RequestCount = SampleSource_SAMPLE_SOURCE_PODS, 0, 0
		}, "s.ready_pods"},
		{"PODS count 2^31-1", func(s *MetricSample) {
			s.Source, s.AverageConcurrency, s.RequestCount, s.ReadyPods = SampleSource_SAMPLE_SOURCE_PODS, 0, 0, i32(math.MaxInt32)
		}, "s.ready_pods"},
		{"PODS with a measurement", func(s *MetricSample) { s.Source, s.ReadyPods = SampleSource_SAMPLE_SOURCE_PODS, i32(2) }, "s.source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(s)
			err := s.ValidateField("s", now)
			if err == nil || !strings.Contains(err.Error(), "invalid "+tt.field+" ") {
				t.Errorf("ValidateField = %v, want an error naming %s", err, tt.field)
			}
		})
	}
	if err := good().ValidateField("s", now); err != nil {
		t.Errorf("good sample refused: %v", err)
	}
	pods := &MetricSample{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_PODS, ReadyPods: i32(0)}
	if err := pods.ValidateField("s", now); err != nil {
		t.Errorf("a change to 0 ready pods refused: %v", err)
	}
	// A committed offset ahead of the end is a documented rule of the lag
	// strategies, not malformed input.
	s := good()
	s.PartitionLags = []*PartitionLag{{EndOffset: 5, CommittedOffset: i64(9)}}
	if err := s.ValidateField("s", now); err != nil {
		t.Errorf("committed ahead of end refused at the API: %v", err)
	}
}

func TestTargetRefValidation(t *testing.T) {
	for _, tt := range []struct {
		ref   *TargetRef
		field string
	}{
		{nil, "t"},
		{&TargetRef{Name: "a"}, "t.namespace"},
		{&TargetRef{Namespace: "Bad_NS", Name: "a"}, "t.namespace"},
		{&TargetRef{Namespace: "ns"}, "t.name"},
		{&TargetRef{Namespace: "ns", Name: strings.Repeat("a", 254)}, "t.name"},
		{&TargetRef{Namespace: "ns", Name: "a", Kind: "Pod\n"}, "t.kind"},
		{&TargetRef{Namespace: "ns", Name: "a", Kind: "1Deployment"}, "t.kind"},
		{&TargetRef{Namespace: "ns", Name: "a", Kind: strings.Repeat("K", 64)}, "t.kind"},
		{&TargetRef{Namespace: "ns", Name: "a", ApiVersion: "apps/v1/x"}, "t.api_version"},
		{&TargetRef{Namespace: "ns", Name: "a", ApiVersion: "Apps/v1"}, "t.api_version"},
		{&TargetRef{Namespace: "ns", Name: "a", ApiVersion: "/v1"}, "t.api_version"},
	} {
		if err := tt.ref.ValidateField("t"); err == nil || !strings.Contains(err.Error(), "invalid "+tt.field+" ") {
			t.Errorf("ValidateField(%v) = %v, want an error naming %s", tt.ref, err, tt.field)
		}
	}
}

func TestDNSNames(t *testing.T) {
	tests := []struct {
		v                string
		label, subdomain bool
	}{
		{"a", true, true},
		{"a-b-1", true, true},
		{"a.b", false, true},
		{"", false, false},
		{"-a", false, false},
		{"a-", false, false},
		{"A", false, false},
		{"a_b", false, false},
		{"a..b", false, false},
		{".a", false, false},
		{"a.-b", false, false},
		{strings.Repeat("a", 63), true, true},
		{strings.Repeat("a", 64), false, true}, // a valid object name in Kubernetes
		{strings.Repeat("a", 64) + ".b", false, true},
		{strings.Repeat("a.", 126) + "a", false, true},
		{strings.Repeat("a.", 127) + "a", false, false},
	}
	for _, tt := range tests {
		if got := IsLabel(tt.v); got != tt.label {
			t.Errorf("IsLabel(%q) = %v, want %v", tt.v, got, tt.label)
		}
		if got := IsSubdomain(tt.v); got != tt.subdomain {
			t.Errorf("IsSubdomain(%q) = %v, want %v", tt.v, got, tt.subdomain)
		}
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"stable: 5 → 3", "stable: 5 → 3"},
		{"line\nbreak\r\tand \x1b[2Jescape\x7f\u0085", "line break  and  [2Jescape  "},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Printable(tt.in); got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
