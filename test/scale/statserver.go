package scale

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/tidalscale/tidal/collector/queuestat"
)

// statServer answers the collector's stat requests on the pod farm's
// listeners with no more than a queue-proxy's metrics port must: a GET of
// queuestat.Path on a kept-alive HTTP/1.1 connection, answered with the
// stat of the pod whose address the connection was made to. net/http's
// server cost the harness about 0.1 core at 10,000 scrapes a second (a
// request's headers map, context and response writer), on a machine where
// the collector then scraped fewer pods than it meant to.
type statServer struct {
	// stat appends to b the body for a request made to address ip at
	// now; false when no Ready pod has that address. A connection's buffer
	// is reused: a new one per answer, grown field by field, was 7.6 % of
	// the harness's CPU at 10,000 targets.
	stat func(b []byte, ip string, now time.Time) ([]byte, bool)

	mu     sync.Mutex
	ls     map[net.Listener]bool
	conns  map[net.Conn]bool
	closed bool
	// wg owns every goroutine serving a listener or a connection.
	wg sync.WaitGroup
}

func newStatServer(stat func(b []byte, ip string, now time.Time) ([]byte, bool)) *statServer {
	return &statServer{stat: stat, ls: map[net.Listener]bool{}, conns: map[net.Conn]bool{}}
}

// Serve accepts l's connections until l or the server is closed.
func (s *statServer) Serve(l net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = l.Close()
		return
	}
	s.ls[l] = true
	s.wg.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.ls, l)
			s.mu.Unlock()
		}()
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				time.Sleep(5 * time.Millisecond) // out of descriptors, say: try again, as net/http does
				continue
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = c.Close()
				return
			}
			s.conns[c] = true
			s.wg.Go(func() { s.serveConn(c) })
			s.mu.Unlock()
		}
	})
}

// Close closes every listener and connection and waits for their
// goroutines.
func (s *statServer) Close() {
	s.mu.Lock()
	s.closed = true
	for l := range s.ls {
		_ = l.Close()
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// maxRequestHead bounds a request line or header line; a longer one ends
// the connection.
const maxRequestHead = 1024

// serveConn answers c's requests in turn until it closes, asks to, or sends
// what a metrics port does not serve.
func (s *statServer) serveConn(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	tcp, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return
	}
	ip := tcp.IP.String() // a connection's address never changes
	br := bufio.NewReaderSize(c, maxRequestHead)
	var out, buf []byte
	for {
		stat, keep, err := readRequest(br)
		if err != nil {
			return
		}
		var body []byte
		status, ctype := "404 Not Found", "text/plain"
		if stat {
			if body, ok = s.stat(buf[:0], ip, time.Now()); ok {
				buf = body
				status, ctype = "200 OK", queuestat.ContentType
			} else {
				status, body = "503 Service Unavailable", []byte("pod not ready\n")
			}
		}
		out = append(out[:0], "HTTP/1.1 "...)
		out = append(out, status...)
		out = append(out, "\r\nContent-Type: "...)
		out = append(out, ctype...)
		out = append(out, "\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(body)), 10)
		if !keep {
			out = append(out, "\r\nConnection: close"...)
		}
		out = append(out, "\r\n\r\n"...)
		out = append(out, body...)
		if _, err := c.Write(out); err != nil || !keep {
			return
		}
	}
}

// errBadRequest is a request a metrics port does not read on: a line too
// long, or a body.
var errBadRequest = errors.New("bad request")

// readRequest reads one request head from br: stat is whether it is a GET
// of queuestat.Path, keep whether the connection stays open after the
// answer (HTTP/1.1 without "Connection: close").
func readRequest(br *bufio.Reader) (stat, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, false, err
	}
	method, rest, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(" "))
	target, proto, _ := bytes.Cut(rest, []byte(" "))
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	stat = string(method) == "GET" && string(target) == queuestat.Path
	keep = string(proto) == "HTTP/1.1"
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			return stat, keep, nil
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			keep = false
		case bytes.EqualFold(name, []byte("Content-Length")) && string(value) != "0",
			bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return false, false, errBadRequest
		}
	}
}
