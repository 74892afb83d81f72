package scrape

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/test/gathered"
)

// servePodWith is servePod with a server the test tunes.
func servePodWith(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func TestKeepAlive(t *testing.T) {
	stat := statHandler(queuestat.Stat{AverageConcurrentRequests: 1})
	closing := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		stat(w, r)
	}
	tests := []struct {
		name string
		// pods serve with handler and, if set, close idle connections
		// after serverIdle.
		pods       int
		handler    http.HandlerFunc
		serverIdle time.Duration
		maxIdle    int
		idle       time.Duration
		pause      time.Duration // between rounds
		// wantDials after three rounds
		wantDials int
	}{
		{name: "kept alive", pods: 3, handler: stat, maxIdle: 10, idle: time.Minute, wantDials: 3},
		{name: "bounded in all", pods: 3, handler: stat, maxIdle: 2, idle: time.Minute, wantDials: 3 + 2*1},
		{name: "none kept", pods: 3, handler: stat, maxIdle: 0, idle: time.Minute, wantDials: 3 * 3},
		{name: "pod asks to close", pods: 3, handler: closing, maxIdle: 10, idle: time.Minute, wantDials: 3 * 3},
		{name: "unused too long", pods: 1, handler: stat, maxIdle: 10, idle: 20 * time.Millisecond, pause: 60 * time.Millisecond, wantDials: 3},
		// The pod closed the kept connection: the request is retried on a
		// new one and nothing fails.
		{name: "pod closed it meanwhile", pods: 1, handler: stat, serverIdle: 10 * time.Millisecond, maxIdle: 10, idle: time.Minute,
			pause: 60 * time.Millisecond, wantDials: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakePods{ready: map[string]bool{}}
			for i := range tt.pods {
				name := string(rune('a' + i))
				srv := &http.Server{Handler: tt.handler, ReadHeaderTimeout: time.Second, IdleTimeout: tt.serverIdle}
				src.pods = append(src.pods, Pod{Name: name, Addr: servePodWith(t, srv)})
				src.ready[name] = true
			}
			cfg := defaultConfig(t)
			cfg.MaxIdleConns, cfg.IdleConnTimeout = tt.maxIdle, tt.idle
			rec := &recorder{}
			s, reg := startScraper(t, cfg, rec)
			s.Set(testTarget(src, Format{}))
			for round := range 3 {
				if round > 0 {
					time.Sleep(tt.pause)
				}
				s.ScrapeNow(context.Background())
				if samples, failures := rec.take(); len(samples) != 1 || len(failures) != 0 {
					t.Fatalf("round %d: samples %v, failures %+v; want one sample", round, samples, failures)
				}
			}
			if got := gathered.Sum(t, reg, "tidal_collector_scrape_dials_total", ""); got != float64(tt.wantDials) {
				t.Errorf("dials = %v, want %d", got, tt.wantDials)
			}
			if n := s.client.sweep(time.Now()); n > tt.maxIdle || n > tt.pods {
				t.Errorf("%d connections kept, want at most %d and one a pod", n, tt.maxIdle)
			}
		})
	}
}

func TestSweepClosesStale(t *testing.T) {
	addr := servePod(t, statHandler(queuestat.Stat{}))
	cfg := defaultConfig(t)
	cfg.IdleConnTimeout = time.Minute
	c := newClient(cfg)
	x := newExchange()
	if err := c.do(x, addr, newRequest(queuestat.Path, Format{}, false), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	conn := c.idle[addr].conn
	c.mu.Unlock()
	if n := c.sweep(time.Now()); n != 1 {
		t.Fatalf("sweep kept %d connections right after use, want 1", n)
	}
	if n := c.sweep(time.Now().Add(time.Minute)); n != 0 {
		t.Fatalf("sweep kept %d connections unused for the idle timeout, want 0", n)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on the swept connection: %v, want it closed", err)
	}
}

func TestNewRequest(t *testing.T) {
	tests := []struct {
		path string
		f    Format
		want string
	}{
		{"/metrics", Format{}, "GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9090\r\nUser-Agent: tidal-collector\r\nAccept: " + queuestat.ContentType + "\r\n\r\n"},
		{"/stats?x=1&y=2", Format{Kind: FormatText}, "GET /stats?x=1&y=2 HTTP/1.1\r\nHost: 10.0.0.1:9090\r\nUser-Agent: tidal-collector\r\nAccept: text/plain; version=0.0.4\r\n\r\n"},
		// A path cannot add a header.
		{"/a\r\nX-Evil: 1", Format{}, "GET /a  X-Evil: 1 HTTP/1.1\r\nHost: 10.0.0.1:9090\r\nUser-Agent: tidal-collector\r\nAccept: " + queuestat.ContentType + "\r\n\r\n"},
	}
	for _, tt := range tests {
		r := newRequest(tt.path, tt.f, false)
		if got := string(r.head) + "10.0.0.1:9090" + string(r.tail); got != tt.want {
			t.Errorf("newRequest(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestMaxIdleConnsBoundedByOpenFiles(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	low := lim
	low.Cur = min(lim.Cur, 4096)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	for _, tt := range []struct{ asked, want int }{
		{asked: 100, want: 100},
		{asked: 1 << 20, want: int(low.Cur / 2)},
	} {
		cfg := defaultConfig(t)
		cfg.MaxIdleConns = tt.asked
		s := New(cfg, &recorder{}, NewMetrics(prometheus.NewRegistry()), zap.NewNop())
		if s.client.maxIdle != tt.want {
			t.Errorf("--max-idle-conns %d with an open-file limit of %d: %d kept, want %d", tt.asked, low.Cur, s.client.maxIdle, tt.want)
		}
	}
}
