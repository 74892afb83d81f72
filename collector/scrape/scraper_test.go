package scrape

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/gathered"
	"github.com/tidalscale/tidal/test/testkit"
)

// fakePods is a PodSource over a fixed list with a mutable ready set.
type fakePods struct {
	mu    sync.Mutex
	pods  []Pod
	ready map[string]bool
}

func (f *fakePods) ReadyPods(dst []Pod) []Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if f.ready[p.Name] {
			dst = append(dst, p)
		}
	}
	return dst
}

func (f *fakePods) IsReady(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready[name]
}

func (f *fakePods) unready(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready[name] = false
}

// recorder keeps what a Scraper reports; events has the samples' times
// and the CompleteBefore times (as negative Unix nanoseconds) in the order
// they came.
type recorder struct {
	mu       sync.Mutex
	samples  []*commonv1.MetricSample
	failures []Failure
	events   []int64
}

func (r *recorder) Record(_ *commonv1.TargetRef, s *commonv1.MetricSample) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	r.events = append(r.events, s.GetTime().AsTime().UnixNano())
	return true
}

func (r *recorder) CompleteBefore(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, -t.UnixNano())
}

func (r *recorder) Failed(_ *commonv1.TargetRef, f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, f)
}

func (r *recorder) take() ([]*commonv1.MetricSample, []Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, f := r.samples, r.failures
	r.samples, r.failures = nil, nil
	return s, f
}

// servePod starts an HTTP server on loopback acting as one pod's metrics
// endpoint and returns its address.
func servePod(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func statHandler(s queuestat.Stat) http.HandlerFunc {
	body := queuestat.Marshal(s)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != queuestat.Path {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", queuestat.ContentType)
		_, _ = w.Write(body)
	}
}

func defaultConfig(t testing.TB) Config {
	var c Config
	c.RegisterFlagsWithPrefix("scrape.", flag.NewFlagSet("test", flag.PanicOnError))
	if err := c.Validate("scrape."); err != nil {
		t.Fatal(err)
	}
	return c
}

// startScraper runs a Scraper whose ticker never fires during the test;
// tests drive it with ScrapeNow.
func startScraper(t testing.TB, cfg Config, rec Recorder) (*Scraper, *prometheus.Registry) {
	t.Helper()
	cfg.Interval = time.Hour
	reg := prometheus.NewRegistry()
	s := New(cfg, rec, NewMetrics(reg), zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, reg
}

var ref = &commonv1.TargetRef{Namespace: "ns", Name: "hello"}

func testTarget(src PodSource, f Format) Target {
	return Target{Ref: ref, Path: queuestat.Path, Format: f, StableWindow: time.Minute, Pods: src}
}

func TestScrapeExtrapolates(t *testing.T) {
	// 10 ready pods each serving concurrency 2 (0.5 proxied), 4 rps: the
	// sample is 7 and the extrapolated total is 10 times one pod.
	src := &fakePods{ready: map[string]bool{}}
	start := time.Now().Add(-time.Hour)
	for i := range 10 {
		name := "pod-" + string(rune('a'+i))
		addr := servePod(t, statHandler(queuestat.Stat{PodName: name, AverageConcurrentRequests: 2, AverageProxiedConcurrentRequests: 0.5, RequestCount: 4, ProxiedRequestCount: 1}))
		src.pods = append(src.pods, Pod{Name: name, Addr: addr, Start: start})
		src.ready[name] = true
	}
	rec := &recorder{}
	s, reg := startScraper(t, defaultConfig(t), rec)
	s.Set(testTarget(src, Format{}))
	before := time.Now()
	s.ScrapeNow(context.Background())
	samples, failures := rec.take()
	if len(failures) != 0 || len(samples) != 1 {
		t.Fatalf("got %d samples, failures %v; want 1 sample", len(samples), failures)
	}
	got := samples[0]
	if got.GetAverageConcurrency() != 20 || got.GetAverageProxiedConcurrency() != 5 || got.GetRequestCount() != 40 || got.GetProxiedRequestCount() != 10 {
		t.Errorf("sample = %v, want concurrency 20, proxied 5, requests 40, proxied 10", got)
	}
	if got.GetReadyPods() != 10 || got.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE {
		t.Errorf("ready pods %d, source %v; want 10, SCRAPE", got.GetReadyPods(), got.GetSource())
	}
	if at := got.GetTime().AsTime(); at.Before(before) || at.After(time.Now()) {
		t.Errorf("sample time %v not the scrape's round (after %v)", at, before)
	}
	if n := gathered.Sum(t, reg, "tidal_collector_pods_scraped_total", ""); n != 7 {
		t.Errorf("pods scraped = %v, want 7 (the sample size of 10)", n)
	}
}

func TestScrapeRecordsAtItsRound(t *testing.T) {
	// A scrape that ends in the next second is recorded at its round's
	// time, not when it ended: the next round's sample must not share its
	// second's bucket, which the decider would sum.
	var clockMu sync.Mutex
	clock := time.Unix(1000, 900e6)
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	stat := statHandler(queuestat.Stat{AverageConcurrentRequests: 3})
	addr := servePod(t, func(w http.ResponseWriter, r *http.Request) {
		clockMu.Lock()
		clock = clock.Add(300 * time.Millisecond) // the pod answers late
		clockMu.Unlock()
		stat(w, r)
	})
	src := &fakePods{ready: map[string]bool{"a": true}, pods: []Pod{{Name: "a", Addr: addr, Start: time.Unix(0, 0)}}}
	rec := &recorder{}
	cfg := defaultConfig(t)
	cfg.Interval = time.Hour // driven by ScrapeNow
	s := newScraper(cfg, rec, NewMetrics(prometheus.NewRegistry()), zap.NewNop(), now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	s.Set(testTarget(src, Format{}))

	var got []time.Time
	for range 2 {
		s.ScrapeNow(ctx)
		samples, failures := rec.take()
		if len(samples) != 1 {
			t.Fatalf("got %d samples, failures %+v; want 1", len(samples), failures)
		}
		got = append(got, samples[0].GetTime().AsTime())
		clockMu.Lock()
		clock = clock.Add(700 * time.Millisecond) // the next round, a second after the last
		clockMu.Unlock()
	}
	if want := []time.Time{time.Unix(1000, 900e6), time.Unix(1001, 900e6)}; !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Errorf("sample times %v, want their rounds' %v", got, want)
	}
}

// orderRecorder keeps the names of the targets recorded, in order.
type orderRecorder struct {
	mu    sync.Mutex
	names []string
}

func (r *orderRecorder) Record(ref *commonv1.TargetRef, _ *commonv1.MetricSample) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, ref.GetName())
	return true
}

func (r *orderRecorder) Failed(*commonv1.TargetRef, Failure) {}

func (r *orderRecorder) CompleteBefore(time.Time) {}

func (r *orderRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.names
	r.names = nil
	return n
}

func TestScrapeOrderIsStable(t *testing.T) {
	// Every round scrapes the targets in the order they came (one worker
	// makes the order visible), a removed one leaving the others' order.
	cfg := defaultConfig(t)
	cfg.Workers = 1
	rec := &orderRecorder{}
	s, _ := startScraper(t, cfg, rec)
	addr := servePod(t, statHandler(queuestat.Stat{AverageConcurrentRequests: 1}))
	src := &fakePods{ready: map[string]bool{"a": true}, pods: []Pod{{Name: "a", Addr: addr, Start: time.Unix(0, 0)}}}
	var names []string
	for i := range 8 {
		name := fmt.Sprintf("t%d", i)
		names = append(names, name)
		s.Set(Target{Ref: &commonv1.TargetRef{Namespace: "ns", Name: name}, Path: queuestat.Path, StableWindow: time.Minute, Pods: src})
	}
	for round := range 2 {
		s.ScrapeNow(context.Background())
		if got := rec.take(); !slices.Equal(got, names) {
			t.Fatalf("round %d scraped %v, want %v", round, got, names)
		}
	}
	s.Remove(&commonv1.TargetRef{Namespace: "ns", Name: "t3"})
	s.ScrapeNow(context.Background())
	if got, want := rec.take(), slices.Delete(slices.Clone(names), 3, 4); !slices.Equal(got, want) {
		t.Errorf("after removing t3 scraped %v, want %v", got, want)
	}
}

func TestScrapeBadPods(t *testing.T) {
	good := statHandler(queuestat.Stat{AverageConcurrentRequests: 3, RequestCount: 1})
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tests := []struct {
		name    string
		handler http.HandlerFunc
		reason  string
	}{
		{"status 500", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }, ReasonStatus},
		{"wrong content type", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(queuestat.Marshal(queuestat.Stat{AverageConcurrentRequests: 1}))
		}, ReasonContentType},
		{"oversized body", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", queuestat.ContentType)
			_, _ = w.Write(queuestat.Marshal(queuestat.Stat{PodName: strings.Repeat("x", 400)}))
		}, ReasonTooLarge},
		{"malformed body", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", queuestat.ContentType)
			_, _ = w.Write([]byte{0x0a, 0x7f, 'x'}) // pod_name claims 127 bytes
		}, ReasonMalformed},
		{"NaN", statHandler(queuestat.Stat{AverageConcurrentRequests: nan()}), ReasonBadValue},
		{"negative", statHandler(queuestat.Stat{RequestCount: -1}), ReasonBadValue},
		{"proxied over total", statHandler(queuestat.Stat{AverageConcurrentRequests: 1, AverageProxiedConcurrentRequests: 2}), ReasonBadValue},
		{"hangs", func(http.ResponseWriter, *http.Request) { <-hang }, ReasonTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			// Three pods: sample 3, one bad: the sample cannot be filled.
			src := &fakePods{ready: map[string]bool{"a": true, "b": true, "bad": true}}
			src.pods = []Pod{
				{Name: "a", Addr: servePod(t, good), Start: now},
				{Name: "b", Addr: servePod(t, good), Start: now},
				{Name: "bad", Addr: servePod(t, tt.handler), Start: now},
			}
			cfg := defaultConfig(t)
			// Only the hanging pod reaches the timeout: long enough that a
			// good pod answers on a machine busy with other tests (at 200 ms
			// pod a timed out in a full make test).
			cfg.Timeout = 2 * time.Second
			rec := &recorder{}
			s, reg := startScraper(t, cfg, rec)
			s.Set(testTarget(src, Format{}))
			s.ScrapeNow(context.Background())
			samples, failures := rec.take()
			if len(samples) != 0 {
				t.Errorf("recorded %v; a scrape whose sample cannot be filled records nothing", samples)
			}
			if len(failures) != 2 || failures[0].Pod != "bad" || failures[0].Reason != tt.reason || failures[1].Reason != ReasonSample {
				t.Fatalf("failures = %+v; want pod bad with %s, then the whole scrape", failures, tt.reason)
			}
			if got := gathered.Sum(t, reg, "tidal_collector_scrape_failures_total", tt.reason); got != 1 {
				t.Errorf("failures{reason=%s} = %v, want 1", tt.reason, got)
			}

			// With a fourth good pod as a spare, the sample (4 of 4 is
			// still all of them) — so add two: 5 pods, sample 4.
			for _, n := range []string{"c", "d"} {
				src.pods = append(src.pods, Pod{Name: n, Addr: servePod(t, good), Start: now})
				src.ready[n] = true
			}
			s.ScrapeNow(context.Background())
			samples, _ = rec.take()
			if len(samples) != 1 || samples[0].GetAverageConcurrency() != 3*5 {
				t.Errorf("with spares: samples %v, want one with concurrency 15 (4 good pods of 3, times 5/4)", samples)
			}
		})
	}
}

func TestScrapeVanishedPod(t *testing.T) {
	now := time.Now()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close() // nothing listens: connection refused
	src := &fakePods{ready: map[string]bool{"a": true, "gone": true}}
	src.pods = []Pod{{Name: "a", Addr: servePod(t, statHandler(queuestat.Stat{AverageConcurrentRequests: 1})), Start: now}, {Name: "gone", Addr: gone, Start: now}}
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	s.Set(testTarget(src, Format{}))
	// Deleted between listing and reading.
	src.unready("gone")
	src.mu.Lock()
	src.ready["gone"] = true
	src.mu.Unlock()
	s.ScrapeNow(context.Background())
	_, failures := rec.take()
	if len(failures) == 0 || failures[0].Reason != ReasonConnect {
		t.Fatalf("failures = %+v, want connect for a pod still listed", failures)
	}
	// Now the informer dropped it while the scrape was in flight: the
	// failure is a vanished pod, not a broken one.
	s.Set(testTarget(&vanishing{fakePods: src, name: "gone"}, Format{}))
	s.ScrapeNow(context.Background())
	_, failures = rec.take()
	if len(failures) == 0 || failures[0].Reason != ReasonVanished {
		t.Fatalf("failures = %+v, want vanished", failures)
	}
}

// vanishing lists a pod but reports it gone when asked after a failure.
type vanishing struct {
	*fakePods
	name string
}

func (v *vanishing) IsReady(name string) bool { return name != v.name && v.fakePods.IsReady(name) }

func TestScrapeNoPodsRecordsNothing(t *testing.T) {
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	s.Set(testTarget(&fakePods{}, Format{}))
	s.ScrapeNow(context.Background())
	if samples, failures := rec.take(); len(samples)+len(failures) != 0 {
		t.Errorf("got %v, %v; want nothing for a target without ready pods", samples, failures)
	}
}

func textHandler(body *string, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(*body))
	}
}

func TestScrapeTextGauge(t *testing.T) {
	var mu sync.Mutex
	body := "# TYPE app_inflight gauge\napp_inflight{route=\"/\"} 2\napp_inflight{route=\"/x\"} 1\n"
	src := &fakePods{ready: map[string]bool{"a": true}, pods: []Pod{{Name: "a", Addr: servePod(t, textHandler(&body, &mu))}}}
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	s.Set(testTarget(src, Format{Kind: FormatText, Metric: "app_inflight"}))
	s.ScrapeNow(context.Background())
	samples, failures := rec.take()
	if len(samples) != 1 || samples[0].GetAverageConcurrency() != 3 {
		t.Fatalf("samples %v failures %v, want concurrency 3", samples, failures)
	}
	mu.Lock()
	body = "app_inflight -1\n"
	mu.Unlock()
	s.ScrapeNow(context.Background())
	if samples, failures = rec.take(); len(samples) != 0 || len(failures) == 0 || failures[0].Reason != ReasonBadValue {
		t.Errorf("negative gauge: samples %v failures %+v, want bad-value", samples, failures)
	}
	mu.Lock()
	body = "other 1\n"
	mu.Unlock()
	s.ScrapeNow(context.Background())
	if samples, failures = rec.take(); len(samples) != 0 || len(failures) == 0 || failures[0].Reason != ReasonMalformed {
		t.Errorf("missing series: samples %v failures %+v, want malformed", samples, failures)
	}
}

func TestScrapeTextCounter(t *testing.T) {
	var mu sync.Mutex
	body := "http_requests_total 100\n"
	clock := time.Unix(1000, 0)
	src := &fakePods{ready: map[string]bool{"a": true}, pods: []Pod{{Name: "a", Addr: servePod(t, textHandler(&body, &mu))}}}
	rec := &recorder{}
	cfg := defaultConfig(t)
	cfg.Interval = time.Hour
	reg := prometheus.NewRegistry()
	var clockMu sync.Mutex
	s := newScraper(cfg, rec, NewMetrics(reg), zap.NewNop(), func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	s.Set(testTarget(src, Format{Kind: FormatText, Metric: "http_requests_total", Counter: true, RPS: true}))

	s.ScrapeNow(ctx)
	if samples, failures := rec.take(); len(samples) != 0 || len(failures) == 0 || failures[0].Reason != ReasonCounter {
		t.Fatalf("first reading: samples %v failures %+v, want no sample and a counter failure", samples, failures)
	}
	mu.Lock()
	body = "http_requests_total 130\n"
	mu.Unlock()
	clockMu.Lock()
	clock = clock.Add(2 * time.Second)
	clockMu.Unlock()
	s.ScrapeNow(ctx)
	samples, failures := rec.take()
	if len(samples) != 1 || samples[0].GetRequestCount() != 15 {
		t.Fatalf("second reading: samples %v failures %+v, want 15 requests per second", samples, failures)
	}
	mu.Lock()
	body = "http_requests_total 5\n"
	mu.Unlock()
	clockMu.Lock()
	clock = clock.Add(time.Second)
	clockMu.Unlock()
	s.ScrapeNow(ctx)
	if samples, failures = rec.take(); len(samples) != 0 || len(failures) == 0 || failures[0].Reason != ReasonCounter {
		t.Errorf("reset: samples %v failures %+v, want a counter failure", samples, failures)
	}
}

// TestCounterReadingsFollowPods replaces a counter target's pod again and
// again: the readings kept for rates stay those of its ready pods, not one
// per pod it ever had.
func TestCounterReadingsFollowPods(t *testing.T) {
	var mu sync.Mutex
	body := "http_requests_total 100\n"
	addr := servePod(t, textHandler(&body, &mu))
	src := &fakePods{ready: map[string]bool{}}
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	s.Set(testTarget(src, Format{Kind: FormatText, Metric: "http_requests_total", Counter: true, RPS: true}))
	for i := range 20 {
		name := fmt.Sprintf("pod-%d", i)
		src.mu.Lock()
		src.pods = []Pod{{Name: name, Addr: addr}}
		src.ready = map[string]bool{name: true}
		src.mu.Unlock()
		s.ScrapeNow(context.Background())
		rec.take()
	}
	s.mu.Lock()
	tg := s.targets[ref.Key()]
	s.mu.Unlock()
	tg.counterM.Lock()
	defer tg.counterM.Unlock()
	if len(tg.counters) > 2 {
		t.Errorf("%d counter readings kept after 20 pods came and went one at a time, want at most 2: %v", len(tg.counters), tg.counters)
	}
}

func TestConfigValidate(t *testing.T) {
	base := defaultConfig(t)
	for name, mutate := range map[string]func(*Config){
		"--scrape.interval":          func(c *Config) { c.Interval = 0 },
		"--scrape.timeout":           func(c *Config) { c.Timeout = 0 },
		"--scrape.workers":           func(c *Config) { c.Workers = 0 },
		"--scrape.max-text-body":     func(c *Config) { c.MaxTextBody = 1 },
		"--scrape.idle-conn-timeout": func(c *Config) { c.IdleConnTimeout = -1 },
		"--scrape.max-idle-conns":    func(c *Config) { c.MaxIdleConns = -1 },
	} {
		c := base
		mutate(&c)
		if err := c.Validate("scrape."); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate = %v, want an error naming %s", err, name)
		}
	}
}

// TestCompleteBeforeWaitsForSlowScrapes checks what the decider's early
// ticks rely on: once the scraper says every sample before t has been
// recorded, none stamped before t comes. A pod that answers late holds the
// time at its round's, while later rounds go on.
func TestCompleteBeforeWaitsForSlowScrapes(t *testing.T) {
	asked, release := make(chan struct{}), make(chan struct{})
	var askedOnce sync.Once
	slowStat := statHandler(queuestat.Stat{AverageConcurrentRequests: 7})
	slow := servePod(t, func(w http.ResponseWriter, r *http.Request) {
		askedOnce.Do(func() { close(asked) })
		<-release
		slowStat(w, r)
	})
	fast := servePod(t, statHandler(queuestat.Stat{AverageConcurrentRequests: 1}))
	start := time.Unix(0, 0)
	rec := &recorder{}
	cfg := defaultConfig(t)
	cfg.Interval = 50 * time.Millisecond
	cfg.Timeout = time.Minute // the slow pod answers when released
	s := New(cfg, rec, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
	for name, addr := range map[string]string{"slow": slow, "fast": fast} {
		src := &fakePods{ready: map[string]bool{name: true}, pods: []Pod{{Name: name, Addr: addr, Start: start}}}
		s.Set(Target{Ref: &commonv1.TargetRef{Namespace: "ns", Name: name}, Path: queuestat.Path, StableWindow: time.Minute, Pods: src})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	<-asked
	askedAt := time.Now()
	// Rounds go on for the fast target while the slow one's scrape runs.
	testkit.Eventually(t, time.Minute, "fast samples of later rounds", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, sm := range rec.samples {
			if sm.GetTime().AsTime().After(askedAt) {
				n++
			}
		}
		return n >= 3
	})
	close(release)
	var slowAt time.Time
	testkit.Eventually(t, time.Minute, "a time past the slow sample's", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, sm := range rec.samples {
			if sm.GetAverageConcurrency() == 7 {
				slowAt = sm.GetTime().AsTime()
			}
		}
		return !slowAt.IsZero() && -rec.events[len(rec.events)-1] > slowAt.UnixNano()
	})
	cancel()
	<-done

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var complete int64
	for i, e := range rec.events {
		switch {
		case e < 0 && -e <= complete:
			t.Errorf("event %d: CompleteBefore %v after %v: it must grow", i, time.Unix(0, -e), time.Unix(0, complete))
		case e < 0:
			complete = -e
		case e < complete:
			t.Errorf("event %d: a sample stamped %v after CompleteBefore %v", i, time.Unix(0, e), time.Unix(0, complete))
		}
	}
	if time.Unix(0, complete).Before(slowAt) || complete == 0 {
		t.Errorf("last CompleteBefore %v, want past the slow sample's %v", time.Unix(0, complete), slowAt)
	}
	// Rounds are stamped just after whole intervals, never on one: a tick
	// on a whole second never waits for the round that starts there.
	for _, sm := range rec.samples {
		if at := sm.GetTime().AsTime(); at.Sub(at.Truncate(cfg.Interval)) != roundOffset {
			t.Errorf("a sample stamped %v, want %v after a whole %v", at, roundOffset, cfg.Interval)
		}
	}
}
