package history

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// History is one target's retained samples, oldest first. It is not safe
// for concurrent use: its owner locks.
//
// Samples are kept as flat records in a ring, not as the protobuf messages
// they arrive in (four heap objects each), and a sample that repeats the
// last one's partition lags shares them: the history is most of the
// collector's heap. A ring grows by an eighth when full and shrinks to an
// eighth above its count when half empty, so a settled one holds its span
// of retention in at most twice, and mostly 1.125 times, the room its
// samples need.
type History struct {
	// Retention is how far behind the newest sample samples are kept.
	Retention time.Duration

	// ring[(start+i) mod len(ring)] is the i-th oldest of n samples.
	ring []record
	// lagged parallels ring: a sample's partition count and lags, shared
	// with the sample before when the same (an idle topic's, fetch after
	// fetch). Nil until the first sample with either, so a KPA target pays
	// nothing for them.
	lagged   []*lagged
	start, n int
}

// minRing is the smallest ring, and the size shrinking stops at.
const minRing = 8

// roomFor is the ring size for n samples: an eighth more, so a count that
// wanders by a few samples neither grows nor shrinks the ring each time.
func roomFor(n int) int { return max(minRing, n+n/8) }

// record is one retained sample in 48 bytes: a scraped or pushed sample
// has no partitions, so those live beside the ring (lagged).
type record struct {
	conc       float64
	proxied    float64
	requests   float64
	proxiedReq float64
	// at is the sample's time in Unix nanoseconds: exact for any time
	// within 292 years of 1970, and the collector takes only samples within
	// an hour of its clock.
	at     int64
	ready  int32
	source uint8 // a commonv1.SampleSource; the collector sets only 0–4
	flags  uint8
}

// lagged is a lag sample's partition count (valid with hasPartitions) and
// partition lags. Nothing changes one in place once made.
type lagged struct {
	lags       []lag
	partitions int32
}

const (
	hasReady uint8 = 1 << iota
	hasPartitions
)

// lag is one partition's offsets; committed is valid when hasCommitted.
// topic is empty but for a target that reads several topics.
type lag struct {
	topic        string
	end          int64
	committed    int64
	partition    int32
	hasCommitted bool
}

// New returns an empty History keeping retention behind the newest sample.
func New(retention time.Duration) *History { return &History{Retention: retention} }

func (r *record) time() time.Time { return time.Unix(0, r.at) }

// slot is the ring index of the i-th oldest sample.
func (h *History) slot(i int) int {
	j := h.start + i
	if j >= len(h.ring) {
		j -= len(h.ring)
	}
	return j
}

// Append adds s and drops samples more than Retention older than it. A
// pushed sample stamped with the same second as the newest pushed sample is
// added into it (the decider sums every sample of a second into one bucket
// anyway), so a busy activator costs one sample per second, not one per
// report. merged is true when that happened. s is not kept either way.
func (h *History) Append(s *commonv1.MetricSample) (merged bool) {
	// Nanoseconds, not time.Time: this runs for every sample the collector
	// takes, and the conversions were half its cost.
	at := time.Unix(s.GetTime().GetSeconds(), int64(s.GetTime().GetNanos())).UnixNano()
	if h.n > 0 && s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		last := &h.ring[h.slot(h.n-1)]
		if last.source == uint8(commonv1.SampleSource_SAMPLE_SOURCE_PUSH) && last.at == at {
			last.conc += s.GetAverageConcurrency()
			last.proxied += s.GetAverageProxiedConcurrency()
			last.requests += s.GetRequestCount()
			last.proxiedReq += s.GetProxiedRequestCount()
			return true
		}
	}
	// Samples s pushes out of the span go first, so a full ring grows only
	// when the span really holds more.
	for h.n > 0 && at-h.ring[h.start].at > int64(h.Retention) {
		h.ring[h.start] = record{}
		if h.lagged != nil {
			h.lagged[h.start] = nil
		}
		h.start = h.slot(1)
		h.n--
	}
	// Grow when full; give room back when half empty (a shorter retention
	// or a slower source).
	if h.n == len(h.ring) || len(h.ring) > minRing && h.n < len(h.ring)/2 {
		h.resize(roomFor(h.n + 1))
	}
	i := h.slot(h.n)
	h.ring[i] = toRecord(s, at)
	if pl := s.GetPartitionLags(); len(pl) > 0 || s.PartitionCount != nil {
		if h.lagged == nil {
			h.lagged = make([]*lagged, len(h.ring))
		}
		// An idle topic's offsets stay as they were from one fetch to the
		// next (riff's every 100 ms): the sample shares its predecessor's
		// lags rather than a copy of them.
		var prev *lagged
		if h.n > 0 {
			prev = h.lagged[h.slot(h.n-1)]
		}
		switch parts := s.GetPartitionCount(); {
		case prev == nil || !sameLags(prev.lags, pl):
			h.lagged[i] = &lagged{lags: toLags(pl), partitions: parts}
		case prev.partitions == parts:
			h.lagged[i] = prev
		default:
			h.lagged[i] = &lagged{lags: prev.lags, partitions: parts}
		}
	}
	h.n++
	return false
}

// resize moves the samples, oldest first, into a ring of size (at least n).
func (h *History) resize(size int) {
	ring := make([]record, size)
	var lg []*lagged
	if h.lagged != nil {
		lg = make([]*lagged, size)
	}
	for i := range h.n {
		j := h.slot(i)
		ring[i] = h.ring[j]
		if lg != nil {
			lg[i] = h.lagged[j]
		}
	}
	h.ring, h.lagged, h.start = ring, lg, 0
}

func toRecord(s *commonv1.MetricSample, at int64) record {
	r := record{
		at:         at,
		source:     uint8(s.GetSource()), //nolint:gosec // the collector's own sources, 0–4.
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
	}
	return r
}

func toLags(pl []*commonv1.PartitionLag) []lag {
	ls := make([]lag, len(pl))
	for i, p := range pl {
		ls[i] = lag{topic: p.GetTopic(), partition: p.GetPartition(), end: p.GetEndOffset()}
		if p.CommittedOffset != nil {
			ls[i].committed, ls[i].hasCommitted = *p.CommittedOffset, true
		}
	}
	return ls
}

// sameLags reports whether pl holds exactly the partition lags ls does.
func sameLags(ls []lag, pl []*commonv1.PartitionLag) bool {
	if len(ls) != len(pl) {
		return false
	}
	for i, p := range pl {
		l := ls[i]
		if l.partition != p.GetPartition() || l.topic != p.GetTopic() || l.end != p.GetEndOffset() || l.hasCommitted != (p.CommittedOffset != nil) ||
			(l.hasCommitted && l.committed != p.GetCommittedOffset()) {
			return false
		}
	}
	return true
}

// AddInto adds the request fields of s into dst.
func AddInto(dst, s *commonv1.MetricSample) {
	dst.AverageConcurrency += s.GetAverageConcurrency()
	dst.AverageProxiedConcurrency += s.GetAverageProxiedConcurrency()
	dst.RequestCount += s.GetRequestCount()
	dst.ProxiedRequestCount += s.GetProxiedRequestCount()
}

// Len is the number of retained samples.
func (h *History) Len() int { return h.n }

// AppendTo appends the retained samples, oldest first, to dst as new
// messages that share nothing with the history. The messages, their
// timestamps and their partition lags are carved from a few arrays, so a
// replay of a whole history costs a handful of allocations, not several per
// sample.
func (h *History) AppendTo(dst []*commonv1.MetricSample) []*commonv1.MetricSample {
	if h.n == 0 {
		return dst
	}
	msgs := make([]commonv1.MetricSample, h.n)
	times := make([]timestamppb.Timestamp, h.n)
	var nints, nlags, ncommitted int
	for i := range h.n {
		r := &h.ring[h.slot(i)]
		if r.flags&hasReady != 0 {
			nints++
		}
		if r.flags&hasPartitions != 0 {
			nints++
		}
		for _, l := range h.lagsAt(i) {
			nlags++
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
	for i := range h.n {
		r := &h.ring[h.slot(i)]
		m, ts := &msgs[i], &times[i]
		at := r.time()
		ts.Seconds, ts.Nanos = at.Unix(), int32(at.Nanosecond()) //nolint:gosec // below 1e9
		m.Time = ts
		m.Source = commonv1.SampleSource(r.source)
		m.AverageConcurrency = r.conc
		m.AverageProxiedConcurrency = r.proxied
		m.RequestCount = r.requests
		m.ProxiedRequestCount = r.proxiedReq
		if r.flags&hasReady != 0 {
			ints = append(ints, r.ready)
			m.ReadyPods = &ints[len(ints)-1]
		}
		if r.flags&hasPartitions != 0 {
			ints = append(ints, h.lagged[h.slot(i)].partitions)
			m.PartitionCount = &ints[len(ints)-1]
		}
		if ls := h.lagsAt(i); len(ls) > 0 {
			ptrs := lagPtrs[:len(ls):len(ls)]
			for j, l := range ls {
				lm := &lagMsgs[j]
				lm.Topic, lm.Partition, lm.EndOffset = l.topic, l.partition, l.end
				if l.hasCommitted {
					committed = append(committed, l.committed)
					lm.CommittedOffset = &committed[len(committed)-1]
				}
				ptrs[j] = lm
			}
			m.PartitionLags = ptrs
			lagMsgs, lagPtrs = lagMsgs[len(ls):], lagPtrs[len(ls):]
		}
		dst = append(dst, m)
	}
	return dst
}

// lagsAt returns the i-th oldest sample's partition lags.
func (h *History) lagsAt(i int) []lag {
	if h.lagged == nil || h.lagged[h.slot(i)] == nil {
		return nil
	}
	return h.lagged[h.slot(i)].lags
}

// LastTime returns the newest sample's time, and false when there is none.
func (h *History) LastTime() (time.Time, bool) {
	if h.Len() == 0 {
		return time.Time{}, false
	}
	return h.ring[h.slot(h.n-1)].time(), true
}

// Clone copies a sample; cheaper than proto.Clone for this flat message.
func Clone(s *commonv1.MetricSample) *commonv1.MetricSample {
	return &commonv1.MetricSample{
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
}
