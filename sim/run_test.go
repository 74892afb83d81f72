package sim

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/sim/trace"
)

func TestExtrapolateMatchesCollector(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		n := 1 + rng.IntN(16)
		ready := n + rng.IntN(50)
		var rs []scrape.PodStat
		for range n {
			rs = append(rs, scrape.PodStat{Concurrency: rng.Float64() * 50, ProxiedConcurrency: rng.Float64(), Requests: rng.Float64() * 300, ProxiedRequests: rng.Float64()})
		}
		got := extrapolate(rs, ready)
		want := scrape.Extrapolate(rs, ready, time.Unix(0, 0))
		if got.AverageConcurrentRequests != want.GetAverageConcurrency() || got.AverageProxiedConcurrentRequests != want.GetAverageProxiedConcurrency() ||
			got.RequestCount != want.GetRequestCount() || got.ProxiedRequestCount != want.GetProxiedRequestCount() {
			t.Fatalf("extrapolate(%v, %d) = %+v, collector's = %v", rs, ready, got, want)
		}
	}
}

func table(t *testing.T, rs []*Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestSkipIdleChangesNothing(t *testing.T) {
	// Sparse and bursty days, where the replay jumps over idle stretches,
	// give the same report as a replay that ticks through every second.
	cfgs := []Configuration{*knativeDefaults(t), {Name: "short-grace", Autoscaler: map[string]string{"scale-to-zero-grace-period": "6s", "stable-window": "10s"},
		Pods: Pods{ReadyDelay: Duration(time.Second), ColdStart: Duration(time.Second)}}}
	if err := cfgs[1].Check(); err != nil {
		t.Fatal(err)
	}
	for _, perDay := range []float64{20, 300, 5000} {
		tr := syntheticDay(uint64(perDay), perDay)
		skip, err := Compare(&tr, cfgs, Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		full, err := Compare(&tr, cfgs, Options{Seed: 3, NoSkip: true})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := table(t, skip), table(t, full); a != b {
			t.Errorf("%v/day: with idle skipping\n%s\nticking through\n%s", perDay, a, b)
		}
		for i := range skip {
			if skip[i].Wait != full[i].Wait {
				t.Errorf("%v/day, %s: wait histograms differ", perDay, cfgs[i].Name)
			}
		}
	}
}

var _ = trace.Minutes
