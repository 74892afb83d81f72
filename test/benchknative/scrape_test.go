package benchknative

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corelisters "k8s.io/client-go/listers/core/v1"
	netcfg "knative.dev/networking/pkg/config"
	netstats "knative.dev/networking/pkg/http/stats"
	knmetrics "knative.dev/serving/pkg/autoscaler/metrics"
	"knative.dev/serving/pkg/queue"
	"knative.dev/serving/pkg/resources"

	"github.com/tidalscale/tidal/collector/scrape"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// The scrape pair: Knative's stats scraper and tidal's collector/scrape
// against the same fake queue-proxies. It runs last (go test runs the files
// in name order): Knative's package-level client keeps its idle connections,
// and their goroutines and buffers, for 90 s, which would move the fleet
// benchmarks' goroutine and heap counts. Knative's scraper always dials
// <pod IP>:9090, so every fake pod has its own loopback address. The fake
// pods run in a child process (this test binary, re-executed), so the CPU
// measured is the scrapers' alone.

const (
	queueProxiesEnv = "BENCHKNATIVE_QUEUE_PROXIES"
	// fakePods is how many fake queue-proxies the child serves.
	fakePods      = 1000
	metricsPort   = 9090
	scrapeNS      = "scrape"
	stableWindow  = 60 * time.Second
	reportPeriod  = time.Second
	warmupScrapes = 20
)

// podIP is the loopback address of fake pod j: 127.77.0.1 onwards.
func podIP(j int) string { return fmt.Sprintf("127.77.%d.%d", j/200, j%200+1) }

func podName(j int) string { return fmt.Sprintf("scrape-deployment-7d9f8c-%05d", j) }

func TestMain(m *testing.M) {
	if n, _ := strconv.Atoi(os.Getenv(queueProxiesEnv)); n > 0 {
		if err := serveQueueProxies(n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	code := m.Run()
	stopQueueProxies()
	os.Exit(code)
}

// serveQueueProxies serves n queue-proxy metrics endpoints wired as
// queue-proxy wires its own (pkg/queue/sharedmain/servers.go, v0.50.0):
// a mux with /metrics → NewStatsHandler(ProtobufStatsReporter), fed a
// RequestStatsReport every reporting period as queue-proxy's main loop does.
// It returns when stdin closes.
func serveQueueProxies(n int) error {
	reporters := make([]*queue.ProtobufStatsReporter, n)
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for j := range n {
		reporters[j] = queue.NewProtobufStatsReporter(podName(j), reportPeriod)
		mux := http.NewServeMux()
		mux.Handle("/metrics", queue.NewStatsHandler(reporters[j]))
		ln, err := net.Listen("tcp", net.JoinHostPort(podIP(j), strconv.Itoa(metricsPort)))
		if err != nil {
			return fmt.Errorf("fake queue-proxy %d: %w", j, err)
		}
		s := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
		servers = append(servers, s)
		go func() { _ = s.Serve(ln) }()
	}
	report := func() {
		for _, r := range reporters {
			r.Report(netstats.RequestStatsReport{AverageConcurrency: 3.5, AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 1})
		}
	}
	report()
	tick := time.NewTicker(reportPeriod)
	defer tick.Stop()
	go func() {
		for range tick.C {
			report()
		}
	}()
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes
	return nil
}

var queueProxies struct {
	once  sync.Once
	err   error
	stdin io.WriteCloser
	cmd   *exec.Cmd
}

// startQueueProxies starts the child serving the fake pods, once.
func startQueueProxies(b *testing.B) {
	b.Helper()
	qp := &queueProxies
	qp.once.Do(func() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), queueProxiesEnv+"="+strconv.Itoa(fakePods))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			qp.err = err
			return
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			qp.err = err
			return
		}
		if err := cmd.Start(); err != nil {
			qp.err = err
			return
		}
		qp.cmd, qp.stdin = cmd, stdin
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "READY" {
			qp.err = errors.New("fake queue-proxies did not start (is something else listening on 127.77.x.x:9090?)")
		}
	})
	if qp.err != nil {
		b.Fatal(qp.err)
	}
}

func stopQueueProxies() {
	if qp := &queueProxies; qp.cmd != nil {
		_ = qp.stdin.Close()
		_ = qp.cmd.Wait()
	}
}

// scrapeLayout is a fleet of targets, each with its own pods.
type scrapeLayout struct{ targets, pods int }

func (l scrapeLayout) name() string { return fmt.Sprintf("targets=%d/pods=%d", l.targets, l.pods) }

func (l scrapeLayout) rev(t int) string { return fmt.Sprintf("scrape-%d-%d", l.targets, t) }

// lister holds every target's ready pods, started 10 minutes ago (all
// "old"); target t's pods are fake pods t·pods … (t+1)·pods − 1.
func (l scrapeLayout) lister(b *testing.B) corelisters.PodLister {
	idx := podIndexer()
	started := time.Now().Add(-10 * time.Minute)
	for t := range l.targets {
		for p := range l.pods {
			j := t*l.pods + p
			pod := readyPod(scrapeNS, l.rev(t), j, podIP(j), started)
			pod.Name = podName(j)
			if err := idx.Add(pod); err != nil {
				b.Fatal(err)
			}
		}
	}
	return corelisters.NewPodLister(idx)
}

// scraped is how many pods one round reads: the same sample size on both
// sides (Knative's populationMeanSampleSize, tidal's scrape.SampleSize).
func (l scrapeLayout) scraped() int { return l.targets * scrape.SampleSize(l.pods) }

var scrapeLayouts = []scrapeLayout{{1, 100}, {100, 10}}

// BenchmarkScrape scrapes every target of a layout once per op: Knative's
// StatsScraper (NewStatsScraper with its package keep-alive client, pod IPs
// from the binary's PodAccessor, mesh mode auto: direct pod scraping), one
// goroutine per target as each collection's scrape goroutine would, against
// tidal's Scraper (fasthttp, its worker pool, ScrapeNow), with the pod list
// kept as tidal's collector keeps it. Connections are warm. It reports the
// process CPU (user+system, GC included) and allocations per scraped pod.
func BenchmarkScrape(b *testing.B) {
	for _, l := range scrapeLayouts {
		b.Run(l.name()+"/knative", func(b *testing.B) {
			startQueueProxies(b)
			lister := l.lister(b)
			log := knLogger().Sugar()
			scrapers := make([]knmetrics.StatsScraper, l.targets)
			for t := range scrapers {
				rev := l.rev(t)
				acc := resources.NewPodAccessor(lister, scrapeNS, rev)
				scrapers[t] = knmetrics.NewStatsScraper(knMetric(scrapeNS, rev), rev, acc, false,
					netcfg.MeshCompatibilityModeAuto, log.With("knative.dev/key", scrapeNS+"/"+rev), noopMeters)
			}
			var failed atomic.Int64
			round := func() {
				var wg sync.WaitGroup
				for _, s := range scrapers {
					wg.Go(func() {
						st, err := s.Scrape(stableWindow)
						if err != nil || st.AverageConcurrentRequests <= 0 {
							failed.Add(1)
						}
					})
				}
				wg.Wait()
			}
			measureScrape(b, l, round)
			if n := failed.Load(); n > 0 {
				b.Fatalf("knative: %d scrapes failed", n)
			}
		})
		b.Run(l.name()+"/tidal", func(b *testing.B) {
			startQueueProxies(b)
			lister := l.lister(b)
			var cfg scrape.Config
			cfg.RegisterFlagsWithPrefix("", flag.NewFlagSet("defaults", flag.PanicOnError))
			cfg.Interval = time.Hour // rounds come from ScrapeNow only
			rec := &countingRecorder{}
			s := scrape.New(cfg, rec, scrape.NewMetrics(prometheus.NewRegistry()), knLogger())
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			var version atomic.Uint64 // no pod events during the benchmark
			for t := range l.targets {
				rev := l.rev(t)
				s.Set(scrape.Target{
					Ref:  &commonv1.TargetRef{Namespace: scrapeNS, Name: rev},
					Path: "/metrics", StableWindow: stableWindow,
					Pods: newPodSource(lister, scrapeNS, rev, metricsPort, &version),
				})
			}
			measureScrape(b, l, func() { s.ScrapeNow(ctx) })
			if n := rec.failed.Load(); n > 0 {
				b.Fatalf("tidal: %d failures, the last: %v", n, rec.last.Load())
			}
		})
	}
}

func measureScrape(b *testing.B, l scrapeLayout, round func()) {
	for range warmupScrapes {
		round()
	}
	b.ReportAllocs()
	cpu0, m0 := processCPU(b), mallocs()
	ops := 0
	for b.Loop() {
		round()
		ops++
	}
	cpu, allocs := processCPU(b)-cpu0, mallocs()-m0
	pods := float64(ops * l.scraped())
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/pods, "cpu-µs/pod")
	b.ReportMetric(float64(allocs)/pods, "allocs/pod")
}

// countingRecorder counts tidal's failed scrapes.
type countingRecorder struct {
	failed atomic.Int64
	last   atomic.Value
}

func (r *countingRecorder) Record(*commonv1.TargetRef, *commonv1.MetricSample) bool { return true }

func (r *countingRecorder) CompleteBefore(time.Time) {}

func (r *countingRecorder) Failed(_ *commonv1.TargetRef, f scrape.Failure) {
	r.failed.Add(1)
	r.last.Store(f.Reason + ": " + f.Message)
}
