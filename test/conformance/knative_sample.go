package main

import (
	"encoding/json"
	"fmt"
	"math"
)

// The scraper's sample size and extrapolation belong to the collector's
// scraper; until it exports them, the runner checks these reference
// functions, written from spec §2.2.

// sampleSizeZ2VarOverE2 is X = 1.96² × 100 / 5² = 15.3664: a 95 % confidence
// level, variance 100 and margin of error 5.
const sampleSizeZ2VarOverE2 = 1.96 * 1.96 * 100 / (5 * 5)

// knSampleSize is the number of pods to scrape out of n ready pods:
// n for n ≤ 3, else ⌈n·X / (n + X − 1)⌉.
func knSampleSize(n int) int {
	if n <= 3 {
		return max(n, 0)
	}
	nf := float64(n)
	return int(math.Ceil(nf * sampleSizeZ2VarOverE2 / (nf + sampleSizeZ2VarOverE2 - 1)))
}

// knExtrapolate sums the sampled stats field by field, divides by the sample
// size and multiplies by the ready pod count.
func knExtrapolate(stats []knStat, total int) knStat {
	var s knStat
	for _, p := range stats {
		s.AverageConcurrentRequests += p.AverageConcurrentRequests
		s.AverageProxiedConcurrentRequests += p.AverageProxiedConcurrentRequests
		s.RequestCount += p.RequestCount
		s.ProxiedRequestCount += p.ProxiedRequestCount
	}
	n, t := float64(len(stats)), float64(total)
	s.AverageConcurrentRequests = s.AverageConcurrentRequests / n * t
	s.AverageProxiedConcurrentRequests = s.AverageProxiedConcurrentRequests / n * t
	s.RequestCount = s.RequestCount / n * t
	s.ProxiedRequestCount = s.ProxiedRequestCount / n * t
	return s
}

func replayKnativeSampleSize(raw []byte) error {
	var f struct {
		SampleSize []struct {
			Population int `json:"population"`
			SampleSize int `json:"sample_size"`
		} `json:"sample_size"`
		Extrapolation []struct {
			PodStats []knStat `json:"pod_stats"`
			Sample   int      `json:"sample"`
			Total    int      `json:"total"`
			Result   knStat   `json:"result"`
		} `json:"extrapolation"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("file json - want a sample-size vector got error %w", err)
	}
	for _, c := range f.SampleSize {
		if got := knSampleSize(c.Population); got != c.SampleSize {
			return &mismatch{at: fmt.Sprintf("population %d", c.Population), field: "sample_size", want: c.SampleSize, got: got}
		}
	}
	for i, c := range f.Extrapolation {
		at := fmt.Sprintf("extrapolation %d", i)
		if len(c.PodStats) != c.Sample {
			return &mismatch{at: at, field: "pod_stats", want: c.Sample, got: len(c.PodStats)}
		}
		got := knExtrapolate(c.PodStats, c.Total)
		for _, fl := range []struct {
			name      string
			want, got float64
		}{
			{"average_concurrent_requests", c.Result.AverageConcurrentRequests, got.AverageConcurrentRequests},
			{"average_proxied_concurrent_requests", c.Result.AverageProxiedConcurrentRequests, got.AverageProxiedConcurrentRequests},
			{"request_count", c.Result.RequestCount, got.RequestCount},
			{"proxied_request_count", c.Result.ProxiedRequestCount, got.ProxiedRequestCount},
		} {
			if !floatsEqual(fl.want, fl.got) {
				return &mismatch{at: at, field: fl.name, want: fl.want, got: fl.got}
			}
		}
	}
	return nil
}
