package scrape

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Benchmarks of the scrape path against fake queue-proxies on loopback.
//
// By default the fake pods run in the benchmark's process, so the CPU per
// scraped pod includes serving the request: an upper bound. With
// TIDAL_SCRAPE_BENCH_SERVERS=subprocess they run in child processes, so the
// figure is the scraper's alone.

const (
	fakePodsEnv       = "TIDAL_FAKE_PODS_SERVE"
	fakePodsServerEnv = "TIDAL_FAKE_PODS_SERVER"
)

// podServer is what serves the fake pods.
type podServer string

const (
	// serverFastHTTP answers with fasthttp: the cheapest server, so an
	// in-process benchmark measures mostly the client.
	serverFastHTTP podServer = "fasthttp"
	// serverNetHTTP answers as queue-proxy does: net/http, with its Date
	// and Content-Length headers and a goroutine per connection.
	serverNetHTTP podServer = "net-http"
)

func TestMain(m *testing.M) {
	if n, _ := strconv.Atoi(os.Getenv(fakePodsEnv)); n > 0 {
		serveFakePodsChild(n, podServer(os.Getenv(fakePodsServerEnv)))
		return
	}
	os.Exit(m.Run())
}

// statBody is what a queue-proxy serves for a 36-character pod name: 65
// bytes, as a real queue-proxy's are.
var statBody = queuestat.Marshal(queuestat.Stat{
	PodName: "hello-00001-deployment-5d8f7c9b4-x7k2p"[:36], AverageConcurrentRequests: 3.5,
	AverageProxiedConcurrentRequests: 0.5, RequestCount: 7, ProxiedRequestCount: 1, ProcessUptime: 600, Timestamp: 1700000000,
})

func fakePodHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType(queuestat.ContentType)
	ctx.SetBody(statBody)
}

func fakePodHTTPHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", queuestat.ContentType)
	_, _ = w.Write(statBody)
}

// listenFakePods starts n fake queue-proxies on 127.0.0.1 and returns their
// addresses and a stop function.
func listenFakePods(n int, kind podServer) ([]string, func(), error) {
	addrs := make([]string, 0, n)
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	hs := &http.Server{Handler: http.HandlerFunc(fakePodHTTPHandler), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: log.New(io.Discard, "", 0)}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		switch kind {
		case serverNetHTTP:
			go func() { _ = hs.Serve(ln) }()
		default:
			s := &fasthttp.Server{Handler: fakePodHandler, NoDefaultServerHeader: true, NoDefaultDate: true, IdleTimeout: time.Minute,
				Logger: quiet{}} // strangers probing loopback ports are not the benchmark's business
			stops = append(stops, func() { _ = s.Shutdown() })
			go func() { _ = s.Serve(ln) }()
		}
		addrs = append(addrs, ln.Addr().String())
	}
	stops = append(stops, func() { _ = hs.Close() })
	return addrs, stop, nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func serveFakePodsChild(n int, kind podServer) {
	addrs, stop, err := listenFakePods(n, kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, a := range addrs {
		fmt.Fprintln(w, a)
	}
	fmt.Fprintln(w, "READY")
	_ = w.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes
	stop()
}

// benchPods starts n fake pods, in this process or (with
// TIDAL_SCRAPE_BENCH_SERVERS=subprocess) in children, and returns their
// addresses.
func benchPods(tb testing.TB, n int, kind podServer) []string {
	tb.Helper()
	if os.Getenv("TIDAL_SCRAPE_BENCH_SERVERS") != "subprocess" {
		addrs, stop, err := listenFakePods(n, kind)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(stop)
		return addrs
	}
	return childPods(tb, n, kind)
}

// childPods starts n fake pods in children of at most 4000 pods each (file
// descriptors) and returns their addresses. Their goroutines and CPU are
// not this process's.
func childPods(tb testing.TB, n int, kind podServer) []string {
	tb.Helper()
	var addrs []string
	for left := n; left > 0; left -= 4000 {
		k := min(left, 4000)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fakePodsEnv+"="+strconv.Itoa(k), fakePodsServerEnv+"="+string(kind))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			tb.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && sc.Text() != "READY" {
			addrs = append(addrs, sc.Text())
		}
	}
	if len(addrs) != n {
		tb.Fatalf("fake pods: got %d addresses, want %d", len(addrs), n)
	}
	return addrs
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

type nopRecorder struct{}

func (nopRecorder) Record(*commonv1.TargetRef, *commonv1.MetricSample) bool { return true }
func (nopRecorder) Failed(_ *commonv1.TargetRef, f Failure)                 { panic(f.Message) }
func (nopRecorder) CompleteBefore(time.Time)                                {}

type staticPods []Pod

func (p staticPods) ReadyPods(dst []Pod) []Pod { return append(dst, p...) }
func (p staticPods) IsReady(string) bool       { return true }

// BenchmarkScrape scrapes fleets of targets over 1,000 fake pods (or the
// 1,000 × 10 fleet with TIDAL_SCRAPE_BENCH_FLEET=1). One op is one round:
// every target scraped once, as every second in production. It reports
// CPU and allocations per scraped pod, and the cores a 1 s cadence needs.
func BenchmarkScrape(b *testing.B) {
	layouts := []struct{ targets, pods int }{{100, 10}, {10, 100}}
	if os.Getenv("TIDAL_SCRAPE_BENCH_FLEET") == "1" {
		layouts = append(layouts, struct{ targets, pods int }{1000, 10})
	}
	for _, l := range layouts {
		b.Run(fmt.Sprintf("targets=%d/pods=%d", l.targets, l.pods), func(b *testing.B) {
			addrs := benchPods(b, l.targets*l.pods, serverFastHTTP)
			cfg := defaultConfig(b)
			cfg.Interval = time.Hour
			s := New(cfg, nopRecorder{}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			old := time.Now().Add(-time.Hour)
			for t := range l.targets {
				pods := make(staticPods, l.pods)
				for p := range pods {
					pods[p] = Pod{Name: fmt.Sprintf("t%d-p%d", t, p), Addr: addrs[t*l.pods+p], Start: old}
				}
				s.Set(Target{Ref: &commonv1.TargetRef{Namespace: "bench", Name: fmt.Sprintf("t%d", t)}, Path: "/metrics", StableWindow: time.Minute, Pods: pods})
			}
			// Warm: every pod's connection opened.
			for range 20 {
				s.ScrapeNow(ctx)
			}
			scraped := l.targets * SampleSize(l.pods)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, m0 := cpuTime(), mallocs()
			for b.Loop() {
				s.ScrapeNow(ctx)
			}
			cpu, allocs := cpuTime()-cpu0, mallocs()-m0
			b.StopTimer()
			perPod := float64(cpu.Microseconds()) / float64(b.N*scraped)
			b.ReportMetric(perPod, "cpu-µs/pod")
			b.ReportMetric(float64(allocs)/float64(b.N*scraped), "allocs/pod")
			b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Second), "cores@1s")
		})
	}
}

// BenchmarkGet compares one GET per pod through the plain Go client (as
// Knative's scraper does: keep-alive, io.ReadAll) with fasthttp, at the
// same fan-out as a sample of 14, over 1,000 fake pods.
func BenchmarkGet(b *testing.B) {
	addrs := benchPods(b, 1000, serverFastHTTP)
	const fanout = 14
	run := func(b *testing.B, get func(addr string)) {
		var mu sync.Mutex
		next := 0
		pick := func() string {
			mu.Lock()
			defer mu.Unlock()
			next = (next + 1) % len(addrs)
			return addrs[next]
		}
		for range 2000 {
			get(pick())
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0, m0 := cpuTime(), mallocs()
		for b.Loop() {
			var wg sync.WaitGroup
			for range fanout {
				wg.Go(func() { get(pick()) })
			}
			wg.Wait()
		}
		cpu, allocs := cpuTime()-cpu0, mallocs()-m0
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*fanout), "cpu-µs/get")
		b.ReportMetric(float64(allocs)/float64(b.N*fanout), "allocs/get")
	}
	b.Run("client=net-http", func(b *testing.B) {
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
		run(b, func(addr string) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			req.Header.Set("Accept", queuestat.ContentType)
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(io.LimitReader(resp.Body, queuestat.MaxSize+1))
			_ = resp.Body.Close()
			if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), queuestat.ContentType) || len(body) == 0 {
				b.Fatal(err)
			}
		})
	})
	b.Run("client=net-http-reused-buffer", func(b *testing.B) {
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
		pool := sync.Pool{New: func() any { return make([]byte, queuestat.MaxSize+1) }}
		run(b, func(addr string) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			req.Header.Set("Accept", queuestat.ContentType)
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			buf := pool.Get().([]byte)
			n, _ := io.ReadFull(resp.Body, buf)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if _, err := queuestat.Unmarshal(buf[:n]); err != nil {
				b.Fatal(err)
			}
			pool.Put(buf) //nolint:staticcheck // a fixed-size slice; boxing it is the cost measured
		})
	})
	b.Run("client=fasthttp", func(b *testing.B) {
		// The scraper's client until it kept its own connections: a
		// cleaner goroutine per pod it has connections to.
		c := &fasthttp.Client{MaxConnsPerHost: 4, MaxIdleConnDuration: time.Minute, MaxResponseBodySize: 64 << 10, ReadBufferSize: 4096,
			DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}
		run(b, func(addr string) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + "/metrics")
			req.Header.Set("Accept", queuestat.ContentType)
			if err := c.DoTimeout(req, resp, 3*time.Second); err != nil {
				b.Fatal(err)
			}
			if _, _, err := decodeBody(resp.Header.ContentType(), resp.Body(), Format{}); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("client=tidal", func(b *testing.B) {
		c := newClient(defaultConfig(b))
		b.Cleanup(c.closeIdle)
		xs := sync.Pool{New: func() any { return newExchange() }}
		req := newRequest("/metrics", Format{}, false)
		run(b, func(addr string) {
			x := xs.Get().(*exchange)
			defer xs.Put(x)
			if _, _, err := fetch(c, x, addr, req, Format{}, 3*time.Second); err != nil {
				b.Fatal(err)
			}
		})
	})
}
