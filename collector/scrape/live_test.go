package scrape

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tidalscale/tidal/collector/dispatch"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/gathered"
)

// liveFleet sets targets of 1 to 5 pods each (as make scale's load levels
// give them) over addrs on s and in hub, and returns how many pods one round
// scrapes.
func liveFleet(s *Scraper, hub *dispatch.Hub, addrs []string) (targets, scraped int) {
	old := time.Now().Add(-time.Hour)
	for next := 0; next < len(addrs); targets++ {
		n := min(targets%5+1, len(addrs)-next)
		pods := make(staticPods, n)
		for i := range pods {
			pods[i] = Pod{Name: fmt.Sprintf("t%d-deployment-5d8f7c9b4-%05d", targets, next), Addr: addrs[next], Start: old}
			next++
		}
		ref := &commonv1.TargetRef{Namespace: "bench", Name: fmt.Sprintf("t%d", targets), ApiVersion: "autoscaling.internal.knative.dev/v1alpha1", Kind: "PodAutoscaler"}
		if hub != nil {
			hub.SetSpec(&deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)
		}
		s.Set(Target{Ref: ref, Path: "/metrics", StableWindow: time.Minute, Pods: pods})
		scraped += SampleSize(n)
	}
	return targets, scraped
}

// BenchmarkScrapeLive is the collector's scrape path as the binary runs it:
// 3,000 pods in targets of 1 to 5 pods, answering from net/http servers as
// queue-proxy does, in a child process so the CPU measured is the scraper's
// alone; the default workers; every sample recorded in a dispatch.Hub; and a
// pause between rounds (TIDAL_SCRAPE_BENCH_GAP, default 200ms) in which the
// workers park and the client's idle connections wait, as between the
// rounds of a 1 s cadence. One op is one round. CPU is the process's over
// rounds and pauses alike.
func BenchmarkScrapeLive(b *testing.B) {
	gap := 200 * time.Millisecond
	if v := os.Getenv("TIDAL_SCRAPE_BENCH_GAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("TIDAL_SCRAPE_BENCH_GAP %q: %v", v, err)
		}
		gap = d
	}
	addrs := childPods(b, 3000, serverNetHTTP)
	reg := prometheus.NewRegistry()
	hub := dispatch.New(dispatch.Config{Retention: 2 * time.Minute, HighWater: 100000}, dispatch.NewMetrics(reg), zap.NewNop())
	// The defaults, or the flags in TIDAL_SCRAPE_BENCH_FLAGS
	// ("-scrape.workers=16 -scrape.max-idle-conns=0").
	var cfg Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg.RegisterFlagsWithPrefix("scrape.", fs)
	if err := fs.Parse(strings.Fields(os.Getenv("TIDAL_SCRAPE_BENCH_FLAGS"))); err != nil {
		b.Fatalf("TIDAL_SCRAPE_BENCH_FLAGS: %v", err)
	}
	if err := cfg.Validate("scrape."); err != nil {
		b.Fatal(err)
	}
	cfg.Interval = time.Hour
	s := New(cfg, hub, NewMetrics(reg), zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	_, scraped := liveFleet(s, hub, addrs)
	for range 3 { // every pod's connection opened
		s.ScrapeNow(ctx)
	}
	failed := gathered.Sum(b, reg, "tidal_collector_scrape_failures_total", ReasonSample)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, m0 := cpuTime(), mallocs()
	for b.Loop() {
		s.ScrapeNow(ctx)
		time.Sleep(gap)
	}
	cpu, allocs := cpuTime()-cpu0, mallocs()-m0
	b.StopTimer()
	if f := gathered.Sum(b, reg, "tidal_collector_scrape_failures_total", ReasonSample) - failed; f > 0 {
		b.Fatalf("%v scrapes failed", f)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*scraped), "cpu-µs/pod")
	b.ReportMetric(float64(allocs)/float64(b.N*scraped), "allocs/pod")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
}

// TestGoroutinesBoundedByWorkers scrapes 2,000 pods, each its own host,
// with 8 workers: the scraper's goroutines are bounded by its workers, not
// by the pods it keeps connections to. The pods run in a child process, so
// every goroutine counted here is the scraper's.
func TestGoroutinesBoundedByWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2,000 fake pods in a child process")
	}
	addrs := childPods(t, 2000, serverNetHTTP)
	base := runtime.NumGoroutine()
	cfg := defaultConfig(t)
	cfg.Workers = 8
	rec := &recorder{}
	s, reg := startScraper(t, cfg, rec)
	targets, scraped := liveFleet(s, nil, addrs)
	for round := range 3 {
		s.ScrapeNow(context.Background())
		samples, failures := rec.take()
		if len(samples) != targets || len(failures) != 0 {
			t.Fatalf("round %d: %d samples, failures %.3v; want %d samples", round, len(samples), failures, targets)
		}
	}
	if got := gathered.Sum(t, reg, "tidal_collector_pods_scraped_total", ""); got != float64(3*scraped) {
		t.Fatalf("pods scraped = %v, want %d", got, 3*scraped)
	}
	// Each pod was dialed once, when first sampled: the connections were
	// kept, just not with goroutines.
	if got := gathered.Sum(t, reg, "tidal_collector_scrape_dials_total", ""); got < float64(scraped) || got > float64(len(addrs)) {
		t.Errorf("dials = %v over three rounds of %d pods, want one a pod sampled (%d to %d)", got, scraped, scraped, len(addrs))
	}
	// Workers, the tick loop, and a few the runtime starts (GC workers are
	// not counted): never one per pod.
	const perWorker, spare = 2, 16
	n := runtime.NumGoroutine() - base
	t.Logf("%d goroutines with %d workers and %d pods", n, cfg.Workers, len(addrs))
	if n > perWorker*cfg.Workers+spare {
		t.Errorf("%d goroutines after scraping %d pods with %d workers, want at most %d; by stack:\n%s",
			n, len(addrs), cfg.Workers, perWorker*cfg.Workers+spare, goroutineSummary(10))
	}
}

// goroutineSummary lists the most common goroutine stacks by their top
// frames.
func goroutineSummary(top int) string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	// debug=1 groups identical stacks: "N @ 0x..." then "#\t0x... fn file:line".
	type group struct {
		n      int
		frames string
	}
	var gs []group
	for _, blk := range strings.Split(buf.String(), "\n\n") {
		lines := strings.Split(blk, "\n")
		if strings.HasPrefix(lines[0], "goroutine profile:") {
			lines = lines[1:]
		}
		if len(lines) < 2 || !strings.Contains(lines[0], " @ ") {
			continue
		}
		n, _ := strconv.Atoi(strings.Fields(lines[0])[0])
		var frames []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && len(frames) < 3 {
				frames = append(frames, f[2])
			}
		}
		gs = append(gs, group{n: n, frames: strings.Join(frames, " < ")})
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].n > gs[j].n })
	var out strings.Builder
	for _, g := range gs[:min(top, len(gs))] {
		fmt.Fprintf(&out, "%6d %s\n", g.n, g.frames)
	}
	return out.String()
}
