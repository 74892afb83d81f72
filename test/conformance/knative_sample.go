package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidalscale/tidal/collector/scrape"
)

// The sample-size family checks the collector's scraper itself:
// scrape.SampleSize and scrape.Extrapolate are what every scrape runs.

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
		if got := scrape.SampleSize(c.Population); got != c.SampleSize {
			return &mismatch{at: fmt.Sprintf("population %d", c.Population), field: "sample_size", want: c.SampleSize, got: got}
		}
	}
	for i, c := range f.Extrapolation {
		at := fmt.Sprintf("extrapolation %d", i)
		if len(c.PodStats) != c.Sample {
			return &mismatch{at: at, field: "pod_stats", want: c.Sample, got: len(c.PodStats)}
		}
		rs := make([]scrape.PodStat, len(c.PodStats))
		for j, p := range c.PodStats {
			rs[j] = scrape.PodStat{Concurrency: p.AverageConcurrentRequests, ProxiedConcurrency: p.AverageProxiedConcurrentRequests,
				Requests: p.RequestCount, ProxiedRequests: p.ProxiedRequestCount}
		}
		ms := scrape.Extrapolate(rs, c.Total, time.Unix(0, 0))
		got := knStat{AverageConcurrentRequests: ms.GetAverageConcurrency(), AverageProxiedConcurrentRequests: ms.GetAverageProxiedConcurrency(),
			RequestCount: ms.GetRequestCount(), ProxiedRequestCount: ms.GetProxiedRequestCount()}
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
