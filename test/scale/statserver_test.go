package scale

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidalscale/tidal/collector/queuestat"
)

// TestStatServer: the farm's server answers a metrics GET with the stat of
// the pod at the address the connection was made to, many on one kept-alive
// connection, anything else 404, an address without a pod 503, and closes
// when the client asks.
func TestStatServer(t *testing.T) {
	var asked atomic.Int32
	var gone atomic.Bool // no pod at the address any more
	srv := newStatServer(func(b []byte, ip string, _ time.Time) ([]byte, bool) {
		asked.Add(1)
		return append(b, "stat of "+ip...), !gone.Load()
	})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(l)
	defer srv.Close()

	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a connection left open fails, not hangs
	br := bufio.NewReader(c)
	type answer struct {
		status      int
		ctype, body string
		close       bool
	}
	ask := func(req string) answer {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(body), resp.Close}
	}
	for range 2 {
		a := ask("GET " + queuestat.Path + " HTTP/1.1\r\nHost: pod\r\nAccept: " + queuestat.ContentType + "\r\n\r\n")
		if want := (answer{http.StatusOK, queuestat.ContentType, "stat of 127.0.0.1", false}); a != want {
			t.Errorf("stat: %+v, want %+v", a, want)
		}
	}
	if a := ask("GET /other HTTP/1.1\r\nHost: pod\r\n\r\n"); a.status != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", a.status)
	}
	if a := ask("POST " + queuestat.Path + " HTTP/1.1\r\nHost: pod\r\n\r\n"); a.status != http.StatusNotFound {
		t.Errorf("a POST: %d, want 404", a.status)
	}
	if a := ask("GET " + queuestat.Path + " HTTP/1.1\r\nConnection: close\r\n\r\n"); a.status != http.StatusOK || !a.close {
		t.Errorf("Connection: close: %+v, want 200 and close", a)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close, read %v, want EOF", err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("stat asked %d times, want 3", n)
	}

	gone.Store(true)
	if c, err = net.Dial("tcp4", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br = bufio.NewReader(c)
	if a := ask("GET " + queuestat.Path + " HTTP/1.1\r\n\r\n"); a.status != http.StatusServiceUnavailable {
		t.Errorf("no pod at the address: %d, want 503", a.status)
	}
}

// BenchmarkStatServer is one stat request and its answer on a kept-alive
// connection over loopback, the client's side included (the same raw
// request either way), answered by the farm's server or by net/http's as the
// farm had it before; -benchmem counts both sides' allocations.
func BenchmarkStatServer(b *testing.B) {
	body := []byte("a stat of about forty bytes, as a pod's")
	stat := func(b []byte, _ string, _ time.Time) ([]byte, bool) { return append(b, body...), true }
	for _, c := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"farm", func(l net.Listener) func() {
			s := newStatServer(stat)
			s.Serve(l)
			return s.Close
		}},
		{"net-http", func(l net.Listener) func() {
			mux := http.NewServeMux()
			mux.HandleFunc("GET "+queuestat.Path, func(rw http.ResponseWriter, r *http.Request) {
				local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
				b, _ := stat(nil, local.(*net.TCPAddr).IP.String(), time.Now())
				rw.Header().Set("Content-Type", queuestat.ContentType)
				rw.Header().Set("Content-Length", strconv.Itoa(len(b)))
				_, _ = rw.Write(b)
			})
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(l) }()
			return func() { _ = srv.Close() }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer c.serve(l)()
			conn, err := net.Dial("tcp4", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			req := []byte("GET " + queuestat.Path + " HTTP/1.1\r\nHost: 127.0.0.1:9090\r\nAccept: " + queuestat.ContentType + "\r\nUser-Agent: tidal-collector\r\n\r\n")
			br := bufio.NewReader(conn)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
