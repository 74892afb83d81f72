package history

import (
	"testing"
	"time"

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
	if cap(h.samples) > 64 {
		t.Errorf("backing array grew to %d for 11 retained samples", cap(h.samples))
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
