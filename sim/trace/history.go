package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/sim/podmodel"
)

// MaxHistoryDocument bounds one GetWindow response in a history export.
const MaxHistoryDocument = 64 << 20

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
	dec := json.NewDecoder(io.LimitReader(r, MaxSeconds*4096))
	type key struct {
		sec    int64
		nanos  int32
		source commonv1.SampleSource
	}
	seen := map[key]bool{}
	var samples []*commonv1.MetricSample
	var target string
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("history %s: document %d: %w", name, doc, err)
		}
		if len(raw) > MaxHistoryDocument {
			return Trace{}, fmt.Errorf("history %s: document %d: %d bytes, more than %d", name, doc, len(raw), MaxHistoryDocument)
		}
		var w collectorv1.GetWindowResponse
		if err := protojson.Unmarshal(raw, &w); err != nil {
			return Trace{}, fmt.Errorf("history %s: document %d: not a GetWindowResponse: %w", name, doc, err)
		}
		t := w.GetTarget().GetNamespace() + "/" + w.GetTarget().GetName()
		if target == "" {
			target = t
		} else if t != target {
			return Trace{}, fmt.Errorf("history %s: document %d: field target %s, want one target (%s)", name, doc, quotePrefix(t), quotePrefix(target))
		}
		for i, s := range w.GetSamples() {
			if s.GetTime() == nil {
				return Trace{}, fmt.Errorf("history %s: document %d: samples[%d]: field time is missing", name, doc, i)
			}
			for _, f := range []struct {
				name string
				v    float64
			}{{"requestCount", s.GetRequestCount()}, {"averageConcurrency", s.GetAverageConcurrency()}} {
				if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
					return Trace{}, fmt.Errorf("history %s: document %d: samples[%d]: field %s %v: want a finite number >= 0", name, doc, i, f.name, f.v)
				}
			}
			for j, p := range s.GetPartitionLags() {
				if p.GetEndOffset() < 0 {
					return Trace{}, fmt.Errorf("history %s: document %d: samples[%d].partitionLags[%d]: field endOffset %d is negative", name, doc, i, j, p.GetEndOffset())
				}
			}
			k := key{s.GetTime().GetSeconds(), s.GetTime().GetNanos(), s.GetSource()}
			if seen[k] {
				continue
			}
			seen[k] = true
			samples = append(samples, s)
		}
		if len(samples) > MaxSeconds*4 {
			return Trace{}, fmt.Errorf("history %s: document %d: more than %d samples", name, doc, MaxSeconds*4)
		}
	}
	if len(samples) == 0 {
		return Trace{}, fmt.Errorf("history %s: no samples", name)
	}
	slices.SortStableFunc(samples, func(a, b *commonv1.MetricSample) int {
		return a.GetTime().AsTime().Compare(b.GetTime().AsTime())
	})
	start := samples[0].GetTime().AsTime().Truncate(time.Second)
	last := samples[len(samples)-1].GetTime().AsTime()
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
		at := s.GetTime().AsTime()
		i := int(at.Sub(start) / time.Second)
		if lags := s.GetPartitionLags(); len(lags) > 0 || s.PartitionCount != nil {
			partitions = max(partitions, s.GetPartitionCount(), int32(len(lags)))
			var end int64
			for _, p := range lags {
				end += p.GetEndOffset()
			}
			if prevEnd >= 0 && end > prevEnd {
				spread(rates, start, prevAt, at, float64(end-prevEnd))
			}
			prevEnd, prevAt = end, at
			continue
		}
		switch s.GetSource() {
		case commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE:
			if !scraped[i] {
				rates[i] = 0
			}
			scraped[i] = true
			rates[i] = max(rates[i], s.GetRequestCount())
		case commonv1.SampleSource_SAMPLE_SOURCE_PUSH:
			if !scraped[i] {
				rates[i] += s.GetRequestCount()
			}
		}
	}
	for i, r := range rates {
		rates[i] = min(r, MaxCount)
	}
	return Trace{Name: target, Width: time.Second, Counts: podmodel.CountsFromRates(rates, time.Second), Partitions: partitions}, nil
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
