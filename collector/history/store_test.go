package history

import (
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func sample(at time.Time, src commonv1.SampleSource, c float64) *commonv1.MetricSample {
	return &commonv1.MetricSample{Time: timestamppb.New(at), Source: src, AverageConcurrency: c, RequestCount: c}
}

func TestAppendRetains(t *testing.T) {
	h := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		h.Append(sample(t0.Add(time.Duration(i)*time.Second), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, float64(i)))
	}
	got := h.AppendTo(nil)
	if len(got) != 11 || got[0].GetAverageConcurrency() != 89 || got[10].GetAverageConcurrency() != 99 {
		t.Fatalf("retained %d samples from %v; want 11 from 89 to 99", len(got), got[0].GetAverageConcurrency())
	}
	if len(h.ring) > 16 {
		t.Errorf("ring grew to %d for 11 retained samples", len(h.ring))
	}
}

func TestAppendMergesPushesOfOneSecond(t *testing.T) {
	h := New(time.Minute)
	t0 := time.Unix(1000, 0)
	push := commonv1.SampleSource_SAMPLE_SOURCE_PUSH
	if h.Append(sample(t0, push, 1)) {
		t.Fatal("first sample merged")
	}
	if !h.Append(sample(t0, push, 2)) {
		t.Fatal("second push of the same second not merged")
	}
	h.Append(sample(t0.Add(500*time.Millisecond), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 10))
	if h.Append(sample(t0, push, 4)) {
		t.Error("push merged across a scrape sample")
	}
	h.Append(sample(t0.Add(time.Second), push, 8))
	got := h.AppendTo(nil)
	want := []float64{3, 10, 4, 8}
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].GetAverageConcurrency() != w || got[i].GetRequestCount() != w {
			t.Errorf("sample %d = %v, want %v", i, got[i].GetAverageConcurrency(), w)
		}
	}
	// Copies: merging later does not change what was handed out.
	h.Append(sample(t0.Add(time.Second), push, 1))
	if got[3].GetAverageConcurrency() != 8 {
		t.Error("AppendTo handed out a sample that a later merge changed")
	}
}

func ptr[T any](v T) *T { return &v }

// TestAppendToGivesBackEveryField checks that what is stored flat comes back
// as the message that went in, field for field.
func TestAppendToGivesBackEveryField(t *testing.T) {
	t0 := time.Unix(1000, 250)
	in := []*commonv1.MetricSample{
		{Time: timestamppb.New(t0), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1.5,
			AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 2, ReadyPods: ptr[int32](3)},
		{Time: timestamppb.New(t0.Add(time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_PUSH, AverageConcurrency: 1},
		{Time: timestamppb.New(t0.Add(2 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, ReadyPods: ptr[int32](0)},
		{Time: timestamppb.New(t0.Add(3 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: ptr[int32](3),
			ReadyPods: ptr[int32](2), PartitionLags: []*commonv1.PartitionLag{
				{Partition: 0, EndOffset: 10, CommittedOffset: ptr[int64](4)},
				{Partition: 1, EndOffset: 1 << 40},
				{Partition: 2, EndOffset: 5, CommittedOffset: ptr[int64](-1)},
			}},
		{Time: timestamppb.New(t0.Add(4 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: ptr[int32](0)},
		{Time: timestamppb.New(t0.Add(5 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Partition: 7, EndOffset: 1, CommittedOffset: ptr[int64](1)}}},
		// A target of several topics: the same lags but for a topic are
		// not the same lags.
		{Time: timestamppb.New(t0.Add(6 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Topic: "a", Partition: 7, EndOffset: 1, CommittedOffset: ptr[int64](1)}}},
		{Time: timestamppb.New(t0.Add(7 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1, CommittedOffset: ptr[int64](1)}}},
		{Time: timestamppb.New(t0.Add(8 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
		{Time: timestamppb.New(t0.Add(9 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
		// The same lags with a partition count, then again: the count is
		// the sample's own.
		{Time: timestamppb.New(t0.Add(10 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: ptr[int32](4),
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
		{Time: timestamppb.New(t0.Add(11 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: ptr[int32](4),
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
		{Time: timestamppb.New(t0.Add(12 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: ptr[int32](0),
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
		{Time: timestamppb.New(t0.Add(13 * time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
			PartitionLags: []*commonv1.PartitionLag{{Topic: "b", Partition: 7, EndOffset: 1}}},
	}
	h := New(time.Minute)
	for _, s := range in {
		h.Append(Clone(s))
	}
	got := h.AppendTo(nil)
	if len(got) != len(in) {
		t.Fatalf("got %d samples, want %d", len(got), len(in))
	}
	for i := range in {
		if !proto.Equal(got[i], in[i]) {
			t.Errorf("sample %d:\n got %v\nwant %v", i, got[i], in[i])
		}
	}
	// What was handed out is the caller's: changing it changes nothing held.
	*got[3].PartitionLags[0].CommittedOffset = 99
	*got[0].ReadyPods = 42
	again := h.AppendTo(nil)
	for i := range in {
		if !proto.Equal(again[i], in[i]) {
			t.Errorf("after the caller changed its copy, sample %d = %v, want %v", i, again[i], in[i])
		}
	}
	if last, ok := h.LastTime(); !ok || !last.Equal(t0.Add(13*time.Second)) {
		t.Errorf("LastTime = %v, %v; want %v", last, ok, t0.Add(13*time.Second))
	}
	if _, ok := New(time.Minute).LastTime(); ok {
		t.Error("LastTime of an empty history reports a sample")
	}
}

// TestRetainedBytes bounds what a retained sample costs, since the history is
// most of the collector's heap at 10,000 targets: a scraped KPA sample (a
// sample a second over the collector's default 2-minute history, with and
// without a ready-pod change every 10 s) and a lag sample of ten partitions,
// as the collector stores them, once the history has settled (three
// retention spans appended).
func TestRetainedBytes(t *testing.T) {
	const targets, span = 500, 120
	scrape := func(at time.Time) *commonv1.MetricSample {
		return &commonv1.MetricSample{Time: timestamppb.New(at), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE,
			AverageConcurrency: 1, RequestCount: 2, ReadyPods: ptr[int32](3)}
	}
	cases := []struct {
		name string
		make func(at time.Time) *commonv1.MetricSample
		pods bool    // a ready-pod change half a second after every tenth sample
		max  float64 // bytes per retained sample
	}{
		{"kpa scrape", scrape, false, 60},
		{"kpa scrape, ready pods changing", scrape, true, 60},
		{"lag, 10 partitions moving", func(at time.Time) *commonv1.MetricSample { return lagSample(at, at.Unix()) }, false, 560},
		{"lag, 10 partitions idle", func(at time.Time) *commonv1.MetricSample { return lagSample(at, 100) }, false, 75},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			hs := make([]*History, targets)
			t0 := time.Unix(1000, 0)
			held := 0
			for i := range hs {
				hs[i] = New(span * time.Second)
				for j := range 3 * span {
					at := t0.Add(time.Duration(j) * time.Second)
					hs[i].Append(c.make(at))
					if c.pods && j%10 == 0 {
						hs[i].Append(&commonv1.MetricSample{Time: timestamppb.New(at.Add(time.Second / 2)),
							Source: commonv1.SampleSource_SAMPLE_SOURCE_PODS, ReadyPods: ptr(int32(j % 3))})
					}
				}
				held += hs[i].Len()
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			per := float64(after.HeapAlloc-before.HeapAlloc) / float64(held)
			t.Logf("%.0f bytes per retained sample", per)
			if per > c.max {
				t.Errorf("%.0f bytes per retained sample, want at most %.0f", per, c.max)
			}
			runtime.KeepAlive(hs)
		})
	}
}

// lagSample is a lag sample of ten partitions, each at end offset end.
func lagSample(at time.Time, end int64) *commonv1.MetricSample {
	s := &commonv1.MetricSample{Time: timestamppb.New(at), Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA,
		PartitionCount: ptr[int32](10), ReadyPods: ptr[int32](1)}
	for p := range int32(10) {
		s.PartitionLags = append(s.PartitionLags, &commonv1.PartitionLag{Partition: p, EndOffset: end, CommittedOffset: ptr[int64](50)})
	}
	return s
}

func BenchmarkAppend(b *testing.B) {
	h := New(time.Minute)
	t0 := time.Unix(1000, 0)
	s := &commonv1.MetricSample{Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1, ReadyPods: ptr[int32](3)}
	b.ReportAllocs()
	for i := range b.N {
		s.Time = timestamppb.New(t0.Add(time.Duration(i) * time.Second))
		h.Append(s)
	}
}

func BenchmarkAppendTo(b *testing.B) {
	h := New(2 * time.Minute)
	t0 := time.Unix(1000, 0)
	for i := range 120 {
		h.Append(&commonv1.MetricSample{Time: timestamppb.New(t0.Add(time.Duration(i) * time.Second)),
			Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1, ReadyPods: ptr[int32](3)})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = h.AppendTo(nil)
	}
}
