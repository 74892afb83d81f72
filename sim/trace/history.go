package trace

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tidalscale/tidal/keyval"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/sim/podmodel"
)

// MaxHistoryDocument bounds one GetWindow response in a history export.
const MaxHistoryDocument = 64 << 20

// documentLimit is MaxHistoryDocument; tests lower it.
var documentLimit int64 = MaxHistoryDocument

// ReadHistory reads history exported from a running tidal: one or more
// CollectorService.GetWindow responses for one target, as JSON objects one
// after another (what `grpcurl -d '{"target":…}' … GetWindow` prints, run
// as often as the collector's retention requires and appended to one file).
// Samples seen twice (overlapping windows) count once.
//
// A request-driven target's load per second is the request_count of its
// scrape samples in that second (queue-proxies' arrivals, summed over the
// pods), or, in a second without a scrape (at zero pods), of its pushed
// activator samples. A lag target's load is the records produced: the
// growth of the partitions' summed end offsets between samples, spread over
// the seconds between them. The trace starts at the first sample's second.
func ReadHistory(r io.Reader, name string) (Trace, error) {
	lim := &docLimit{r: r, limit: documentLimit}
	dec := json.NewDecoder(lim)
	var samples []histSample
	var target string
	for doc := 1; ; doc++ {
		// The decoder holds a whole document: bound what it may read
		// before this one ends.
		lim.limit = dec.InputOffset() + documentLimit
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("history %s: document %d: %w", name, doc, err)
		}
		if int64(len(raw)) > documentLimit {
			return Trace{}, fmt.Errorf("history %s: document %d: %d bytes, more than %d", name, doc, len(raw), documentLimit)
		}
		var w collectorv1.GetWindowResponse
		if err := protojson.Unmarshal(raw, &w); err != nil {
			return Trace{}, fmt.Errorf("history %s: document %d: not a GetWindowResponse: %w", name, doc, err)
		}
		t := w.GetTarget().GetNamespace() + "/" + w.GetTarget().GetName()
		if target == "" {
			target = t
		} else if t != target {
			return Trace{}, fmt.Errorf("history %s: document %d: field target %s, want one target (%s)", name, doc, keyval.Quote(t), keyval.Quote(target))
		}
		for i, s := range w.GetSamples() {
			hs, err := compact(s)
			if err != nil {
				return Trace{}, fmt.Errorf("history %s: document %d: samples[%d]: %w", name, doc, i, err)
			}
			samples = append(samples, hs)
		}
		if len(samples) > MaxHistorySamples {
			return Trace{}, fmt.Errorf("history %s: document %d: more than %d samples", name, doc, MaxHistorySamples)
		}
	}
	if len(samples) == 0 {
		return Trace{}, fmt.Errorf("history %s: no samples", name)
	}
	// Oldest first; a sample seen twice (overlapping windows) counts once.
	slices.SortStableFunc(samples, func(a, b histSample) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.source, b.source)
	})
	samples = slices.CompactFunc(samples, func(a, b histSample) bool { return a.at == b.at && a.source == b.source })
	start := time.Unix(0, samples[0].at).Truncate(time.Second)
	last := time.Unix(0, samples[len(samples)-1].at)
	n := int(last.Sub(start)/time.Second) + 1
	if n > MaxSeconds {
		return Trace{}, fmt.Errorf("history %s: spans %s, more than 31 days", name, last.Sub(start))
	}
	rates := make([]float64, n)
	scraped := make([]bool, n)
	var partitions int32
	var prevEnd int64 = -1
	var prevAt time.Time
	for _, s := range samples {
		at := time.Unix(0, s.at)
		i := int(at.Sub(start) / time.Second)
		if s.lag {
			partitions = max(partitions, s.partitions)
			if prevEnd >= 0 && s.endSum > prevEnd {
				spread(rates, start, prevAt, at, float64(s.endSum-prevEnd))
			}
			prevEnd, prevAt = s.endSum, at
			continue
		}
		switch s.source {
		case commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE:
			if !scraped[i] {
				rates[i] = 0
			}
			scraped[i] = true
			rates[i] = max(rates[i], s.requests)
		case commonv1.SampleSource_SAMPLE_SOURCE_PUSH:
			if !scraped[i] {
				rates[i] += s.requests
			}
		}
	}
	for i, r := range rates {
		rates[i] = min(r, MaxCount)
	}
	return Trace{Name: target, Width: time.Second, Counts: podmodel.CountsFromRates(rates, time.Second), Partitions: partitions}, nil
}

// docLimit fails a read beyond limit bytes into the stream.
type docLimit struct {
	r           io.Reader
	read, limit int64
}

func (d *docLimit) Read(p []byte) (int, error) {
	if d.read >= d.limit {
		return 0, fmt.Errorf("a document longer than %d bytes", documentLimit)
	}
	p = p[:min(int64(len(p)), d.limit-d.read)]
	n, err := d.r.Read(p)
	d.read += int64(n)
	return n, err
}

// MaxHistorySamples bounds the samples of a history export: a month of one
// a second. Each is held in 40 bytes while the export is read.
const MaxHistorySamples = MaxSeconds

// histSample is what a history export's sample contributes to the trace.
type histSample struct {
	at         int64 // Unix nanoseconds
	source     commonv1.SampleSource
	requests   float64
	lag        bool
	partitions int32
	endSum     int64
}

func compact(s *commonv1.MetricSample) (histSample, error) {
	if s.GetTime() == nil {
		return histSample{}, errors.New("field time is missing")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"requestCount", s.GetRequestCount()}, {"averageConcurrency", s.GetAverageConcurrency()}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return histSample{}, fmt.Errorf("field %s %v: want a finite number >= 0", f.name, f.v)
		}
	}
	h := histSample{at: s.GetTime().AsTime().UnixNano(), source: s.GetSource(), requests: s.GetRequestCount()}
	if lags := s.GetPartitionLags(); len(lags) > 0 || s.PartitionCount != nil {
		h.lag = true
		h.partitions = max(s.GetPartitionCount(), int32(len(lags)))
		for j, p := range lags {
			if p.GetEndOffset() < 0 {
				return histSample{}, fmt.Errorf("partitionLags[%d]: field endOffset %d is negative", j, p.GetEndOffset())
			}
			h.endSum += p.GetEndOffset()
		}
	}
	return h, nil
}

// spread adds n arrivals evenly over (from, to], by second.
func spread(rates []float64, start, from, to time.Time, n float64) {
	span := to.Sub(from).Seconds()
	if span <= 0 {
		i := int(to.Sub(start) / time.Second)
		rates[i] += n
		return
	}
	for t := from; t.Before(to); {
		next := t.Truncate(time.Second).Add(time.Second)
		if to.Before(next) {
			next = to
		}
		if next.Equal(t) {
			break
		}
		i := int(t.Sub(start) / time.Second)
		if i >= 0 && i < len(rates) {
			rates[i] += n * next.Sub(t).Seconds() / span
		}
		t = next
	}
}
