package scrape

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tidalscale/tidal/collector/promtext"
	"github.com/tidalscale/tidal/collector/queuestat"
)

// client does the scraper's GETs on its workers' goroutines and keeps pods'
// connections alive without a goroutine of its own. A pod scraped every
// second saves a TCP handshake on each scrape; what must not grow with the
// pods is goroutines (fasthttp's client starts a cleaner per host, and
// net/http two goroutines per connection). Idle connections wait in a map
// keyed by pod address, at most one per pod and maxIdle pods in all; one
// unused for idleTimeout is closed by the next take or sweep.
type client struct {
	maxBody     int
	idleTimeout time.Duration
	maxIdle     int

	// mu guards idle. A pod's entry stays while its connection is in use
	// (conn nil), so a scrape costs one lookup to take it and one to put
	// it back: at 15,000 pods a second the map's hashing showed.
	mu   sync.Mutex
	idle map[string]*idleConn
}

// idleConn is a pod's kept connection (nil while a scrape uses it) and
// when it was last put back.
type idleConn struct {
	conn  net.Conn
	since time.Time
}

func newClient(cfg Config) *client {
	return &client{maxBody: cfg.MaxTextBody, idleTimeout: cfg.IdleConnTimeout, maxIdle: cfg.MaxIdleConns, idle: map[string]*idleConn{}}
}

// request is the GET a target's pods are sent, all but the pod's address:
// built once per target spec, so a scrape only appends the Host.
type request struct {
	head []byte // request line and "Host: "
	tail []byte // the other headers and the blank line
	// host, when set, is the Host sent in place of the address.
	host []byte
}

// directLB returns r sent to each pod with host as its Host and
// Knative-Direct-Lb: true, as Knative's scraper asks a mesh with pod
// addressability (config-network's enable-mesh-pod-addressability) to
// pass the request through to the pod at the address dialed.
func (r request) directLB(host string) request {
	h := []byte(host)
	for i, b := range h {
		if b == '\r' || b == '\n' {
			h[i] = ' '
		}
	}
	tail := append([]byte("\r\nKnative-Direct-Lb: true"), r.tail...)
	return request{head: r.head, tail: tail, host: h}
}

// newRequest builds the GET of path asking for f's content type. The path
// goes out as it is given (a query included), with CR and LF made spaces.
// A request with closeConn asks the server to close the connection after
// it: each one through a Service then reaches a pod the Service picks anew.
func newRequest(path string, f Format, closeConn bool) request {
	var u fasthttp.URI
	u.DisablePathNormalizing = true
	u.SetPath(path)
	head := append([]byte("GET "), u.RequestURI()...)
	for i, b := range head {
		if b == '\r' || b == '\n' {
			head[i] = ' '
		}
	}
	accept := queuestat.ContentType
	if f.Kind == FormatText {
		accept = promtext.ContentType
	}
	tail := "\r\nUser-Agent: tidal-collector\r\nAccept: " + accept + "\r\n"
	if closeConn {
		tail += "Connection: close\r\n"
	}
	return request{
		head: append(head, " HTTP/1.1\r\nHost: "...),
		tail: []byte(tail + "\r\n"),
	}
}

// exchange is one worker's buffers and response, reused for every pod it
// reads.
type exchange struct {
	out  []byte
	resp fasthttp.Response
	br   *bufio.Reader
	// dials counts the connections this exchange opened.
	dials int
}

func newExchange() *exchange {
	x := &exchange{out: make([]byte, 0, 256), br: bufio.NewReaderSize(nil, 4096)}
	// A worker's body buffer stays its own: at most MaxTextBody each.
	x.resp.KeepBodyBuffer = true
	x.resp.Header.DisableNormalizing()
	return x
}

// do sends req to addr and reads x.resp, all before deadline. A kept-alive
// connection that fails is retried once on a new one, as long as time is
// left: the pod may have closed it meanwhile. A timeout or an oversized
// body is never retried; nor is a failed dial.
func (c *client) do(x *exchange, addr string, req request, deadline time.Time) error {
	x.out = append(x.out[:0], req.head...)
	if req.host != nil {
		x.out = append(x.out, req.host...)
	} else {
		x.out = append(x.out, addr...)
	}
	x.out = append(x.out, req.tail...)
	conn := c.take(addr)
	for {
		reused := conn != nil
		if !reused {
			var err error
			d := net.Dialer{Deadline: deadline}
			if conn, err = d.Dial("tcp", addr); err != nil {
				return err
			}
			x.dials++
		}
		keep, err := x.roundTrip(conn, deadline, c.maxBody)
		if err == nil {
			if keep {
				c.put(addr, conn)
			} else {
				_ = conn.Close()
			}
			return nil
		}
		_ = conn.Close()
		if !reused || errors.Is(err, fasthttp.ErrBodyTooLarge) || isTimeout(err) || !time.Now().Before(deadline) {
			return err
		}
		conn = nil
	}
}

// roundTrip writes x.out and reads the response on conn. keep says whether
// conn may carry another request.
func (x *exchange) roundTrip(conn net.Conn, deadline time.Time, maxBody int) (keep bool, err error) {
	// Only the read has a deadline, one timer to reset instead of two: a
	// request of a few hundred bytes on a connection with nothing unsent
	// (every earlier request was answered) fits in the socket's buffer, so
	// the write cannot wait.
	if err := conn.SetReadDeadline(deadline); err != nil {
		return false, err
	}
	if _, err := conn.Write(x.out); err != nil {
		return false, err
	}
	x.br.Reset(conn)
	if err := x.resp.ReadLimitBody(x.br, maxBody); err != nil {
		return false, err
	}
	// A body read to the connection's end, a close asked for, or bytes
	// past the response all end the connection.
	keep = x.resp.Header.ContentLength() != -2 && !x.resp.ConnectionClose() && x.br.Buffered() == 0
	return keep, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}

// take returns the idle connection to addr, or nil: none, or one unused
// too long (closed).
func (c *client) take(addr string) net.Conn {
	var (
		conn  net.Conn
		since time.Time
	)
	c.mu.Lock()
	if ic := c.idle[addr]; ic != nil {
		conn, since, ic.conn = ic.conn, ic.since, nil
	}
	c.mu.Unlock()
	if conn == nil {
		return nil
	}
	if time.Since(since) >= c.idleTimeout {
		_ = conn.Close()
		return nil
	}
	return conn
}

// put keeps conn for addr's next scrape, or closes it when addr has one
// already or maxIdle pods have an entry: the connections kept stay kept,
// and the pods beyond the bound are dialed anew each time.
func (c *client) put(addr string, conn net.Conn) {
	now := time.Now()
	c.mu.Lock()
	switch ic := c.idle[addr]; {
	case ic != nil && ic.conn == nil:
		ic.conn, ic.since = conn, now
		conn = nil
	case ic == nil && len(c.idle) < c.maxIdle:
		c.idle[addr] = &idleConn{conn: conn, since: now}
		conn = nil
	}
	c.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// sweep closes the connections unused for idleTimeout (those of pods gone,
// or no longer sampled) and returns how many are kept.
func (c *client) sweep(now time.Time) int {
	var stale []net.Conn
	c.mu.Lock()
	n := 0
	for addr, ic := range c.idle {
		switch {
		case now.Sub(ic.since) >= c.idleTimeout:
			if ic.conn != nil {
				stale = append(stale, ic.conn)
			}
			delete(c.idle, addr)
		case ic.conn != nil:
			n++
		}
	}
	c.mu.Unlock()
	for _, conn := range stale {
		_ = conn.Close()
	}
	return n
}

// closeIdle closes every idle connection.
func (c *client) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = map[string]*idleConn{}
	c.mu.Unlock()
	for _, ic := range idle {
		if ic.conn != nil {
			_ = ic.conn.Close()
		}
	}
}
