package history

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// History is one target's retained samples, oldest first. It is not safe
// for concurrent use: its owner locks.
//
// Samples are kept as flat records, not as the protobuf messages they arrive
// in: a message with its Timestamp and optional fields is four heap objects
// and about 210 bytes, a record is 88 bytes inside one array, and a
// partition's lag 24 bytes instead of 72. At 10,000 targets the history is
// most of the collector's heap.
type History struct {
	// Retention is how far behind the newest sample samples are kept.
	Retention time.Duration

	samples []record
	head    int // samples[head:] are live; the prefix is reused space
}

// record is one retained sample.
type record struct {
	sec        int64
	nanos      int32
	source     commonv1.SampleSource
	ready      int32
	partitions int32
	flags      uint8
	conc       float64
	proxied    float64
	requests   float64
	proxiedReq float64
	lags       []lag
}

const (
	hasReady uint8 = 1 << iota
	hasPartitions
)

// lag is one partition's offsets; committed is valid when hasCommitted.
type lag struct {
	end          int64
	committed    int64
	partition    int32
	hasCommitted bool
}

// New returns an empty History keeping retention behind the newest sample.
func New(retention time.Duration) *History { return &History{Retention: retention} }

func (r *record) time() time.Time { return time.Unix(r.sec, int64(r.nanos)) }

// Append adds s and drops samples more than Retention older than it. A
// pushed sample stamped with the same second as the newest pushed sample is
// added into it (the decider sums every sample of a second into one bucket
// anyway), so a busy activator costs one sample per second, not one per
// report. merged is true when that happened. s is not kept either way.
func (h *History) Append(s *commonv1.MetricSample) (merged bool) {
	sec, nanos := s.GetTime().GetSeconds(), s.GetTime().GetNanos()
	if n := len(h.samples); n > h.head && s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		last := &h.samples[n-1]
		if last.source == commonv1.SampleSource_SAMPLE_SOURCE_PUSH && last.sec == sec && last.nanos == nanos {
			last.conc += s.GetAverageConcurrency()
			last.proxied += s.GetAverageProxiedConcurrency()
			last.requests += s.GetRequestCount()
			last.proxiedReq += s.GetProxiedRequestCount()
			return true
		}
	}
	h.samples = append(h.samples, toRecord(s))
	newest := h.samples[len(h.samples)-1].time()
	for h.head < len(h.samples) && newest.Sub(h.samples[h.head].time()) > h.Retention {
		h.samples[h.head] = record{}
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

func toRecord(s *commonv1.MetricSample) record {
	r := record{
		sec:        s.GetTime().GetSeconds(),
		nanos:      s.GetTime().GetNanos(),
		source:     s.GetSource(),
		conc:       s.GetAverageConcurrency(),
		proxied:    s.GetAverageProxiedConcurrency(),
		requests:   s.GetRequestCount(),
		proxiedReq: s.GetProxiedRequestCount(),
	}
	if s.ReadyPods != nil {
		r.flags |= hasReady
		r.ready = *s.ReadyPods
	}
	if s.PartitionCount != nil {
		r.flags |= hasPartitions
		r.partitions = *s.PartitionCount
	}
	if pl := s.GetPartitionLags(); len(pl) > 0 {
		r.lags = make([]lag, len(pl))
		for i, p := range pl {
			r.lags[i] = lag{partition: p.GetPartition(), end: p.GetEndOffset()}
			if p.CommittedOffset != nil {
				r.lags[i].committed, r.lags[i].hasCommitted = *p.CommittedOffset, true
			}
		}
	}
	return r
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

// AppendTo appends the retained samples, oldest first, to dst as new
// messages that share nothing with the history. The messages, their
// timestamps and their partition lags are carved from a few arrays, so a
// replay of a whole history costs a handful of allocations, not several per
// sample.
func (h *History) AppendTo(dst []*commonv1.MetricSample) []*commonv1.MetricSample {
	live := h.samples[h.head:]
	if len(live) == 0 {
		return dst
	}
	msgs := make([]commonv1.MetricSample, len(live))
	times := make([]timestamppb.Timestamp, len(live))
	var nints, nlags, ncommitted int
	for i := range live {
		r := &live[i]
		if r.flags&hasReady != 0 {
			nints++
		}
		if r.flags&hasPartitions != 0 {
			nints++
		}
		nlags += len(r.lags)
		for _, l := range r.lags {
			if l.hasCommitted {
				ncommitted++
			}
		}
	}
	// Pointers are taken into ints and committed as they fill: their
	// capacity is exact, so they never move.
	ints := make([]int32, 0, nints)
	var lagMsgs []commonv1.PartitionLag
	var lagPtrs []*commonv1.PartitionLag
	var committed []int64
	if nlags > 0 {
		lagMsgs = make([]commonv1.PartitionLag, nlags)
		lagPtrs = make([]*commonv1.PartitionLag, nlags)
		committed = make([]int64, 0, ncommitted)
	}
	for i := range live {
		r := &live[i]
		m, ts := &msgs[i], &times[i]
		ts.Seconds, ts.Nanos = r.sec, r.nanos
		m.Time = ts
		m.Source = r.source
		m.AverageConcurrency = r.conc
		m.AverageProxiedConcurrency = r.proxied
		m.RequestCount = r.requests
		m.ProxiedRequestCount = r.proxiedReq
		if r.flags&hasReady != 0 {
			ints = append(ints, r.ready)
			m.ReadyPods = &ints[len(ints)-1]
		}
		if r.flags&hasPartitions != 0 {
			ints = append(ints, r.partitions)
			m.PartitionCount = &ints[len(ints)-1]
		}
		if len(r.lags) > 0 {
			ptrs := lagPtrs[:len(r.lags):len(r.lags)]
			for j, l := range r.lags {
				lm := &lagMsgs[j]
				lm.Partition, lm.EndOffset = l.partition, l.end
				if l.hasCommitted {
					committed = append(committed, l.committed)
					lm.CommittedOffset = &committed[len(committed)-1]
				}
				ptrs[j] = lm
			}
			m.PartitionLags = ptrs
			lagMsgs, lagPtrs = lagMsgs[len(r.lags):], lagPtrs[len(r.lags):]
		}
		dst = append(dst, m)
	}
	return dst
}

// LastTime returns the newest sample's time, and false when there is none.
func (h *History) LastTime() (time.Time, bool) {
	if h.Len() == 0 {
		return time.Time{}, false
	}
	return h.samples[len(h.samples)-1].time(), true
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
