package history

import (
	"time"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// History is one target's retained samples, oldest first. It is not safe
// for concurrent use: its owner locks.
type History struct {
	// Retention is how far behind the newest sample samples are kept.
	Retention time.Duration

	samples []*commonv1.MetricSample
	head    int // samples[head:] are live; the prefix is reused space
}

// New returns an empty History keeping retention behind the newest sample.
func New(retention time.Duration) *History { return &History{Retention: retention} }

// Append adds s and drops samples more than Retention older than it. A
// pushed sample stamped with the same second as the newest pushed sample is
// added into it (the decider sums every sample of a second into one bucket
// anyway), so a busy activator costs one sample per second, not one per
// report. merged is true when that happened; s is then not kept.
func (h *History) Append(s *commonv1.MetricSample) (merged bool) {
	live := h.samples[h.head:]
	if n := len(live); n > 0 && s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		last := live[n-1]
		if last.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH && last.GetTime().GetSeconds() == s.GetTime().GetSeconds() && last.GetTime().GetNanos() == s.GetTime().GetNanos() {
			AddInto(last, s)
			return true
		}
	}
	h.samples = append(h.samples, s)
	newest := s.GetTime().AsTime()
	for h.head < len(h.samples) && newest.Sub(h.samples[h.head].GetTime().AsTime()) > h.Retention {
		h.samples[h.head] = nil
		h.head++
	}
	// Compact once the dead prefix is half the slice, so appends stay
	// amortised O(1) and memory stays within twice the retained span.
	if h.head > 0 && h.head*2 >= len(h.samples) {
		n := copy(h.samples, h.samples[h.head:])
		clear(h.samples[n:])
		h.samples = h.samples[:n]
		h.head = 0
	}
	return false
}

// AddInto adds the request fields of s into dst.
func AddInto(dst, s *commonv1.MetricSample) {
	dst.AverageConcurrency += s.GetAverageConcurrency()
	dst.AverageProxiedConcurrency += s.GetAverageProxiedConcurrency()
	dst.RequestCount += s.GetRequestCount()
	dst.ProxiedRequestCount += s.GetProxiedRequestCount()
}

// Len is the number of retained samples.
func (h *History) Len() int { return len(h.samples) - h.head }

// AppendTo appends copies of the retained samples, oldest first, to dst:
// callers outside the owner's lock must not see later merges.
func (h *History) AppendTo(dst []*commonv1.MetricSample) []*commonv1.MetricSample {
	for _, s := range h.samples[h.head:] {
		dst = append(dst, Clone(s))
	}
	return dst
}

// Last returns the newest sample, or nil.
func (h *History) Last() *commonv1.MetricSample {
	if h.Len() == 0 {
		return nil
	}
	return h.samples[len(h.samples)-1]
}

// Clone copies a sample; cheaper than proto.Clone for this flat message.
func Clone(s *commonv1.MetricSample) *commonv1.MetricSample {
	c := &commonv1.MetricSample{
		Time:                      s.GetTime(), // timestamps are never changed in place
		Source:                    s.GetSource(),
		AverageConcurrency:        s.GetAverageConcurrency(),
		AverageProxiedConcurrency: s.GetAverageProxiedConcurrency(),
		RequestCount:              s.GetRequestCount(),
		ProxiedRequestCount:       s.GetProxiedRequestCount(),
		PartitionLags:             s.GetPartitionLags(), // never changed in place
		ReadyPods:                 s.ReadyPods,
		PartitionCount:            s.PartitionCount,
	}
	return c
}
