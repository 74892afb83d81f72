package activator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// closeServiceRestart tells an activator to reconnect at once, to another
// replica behind the Service, as Knative's autoscaler does on shutdown.
const closeServiceRestart = 1012

// controlWait bounds writing a pong or a close frame.
const controlWait = time.Second

// shutdownWait bounds the HTTP server's graceful stop.
const shutdownWait = 5 * time.Second

// Server is the websocket endpoint activators report to.
type Server struct {
	cfg      Config
	router   *Router
	metrics  *Metrics
	log      *zap.Logger
	limit    *logkey.Limiter
	now      func() time.Time
	upgrader websocket.Upgrader

	// mu guards conns, pending and closing; wg counts the connections'
	// handlers.
	mu      sync.Mutex
	conns   map[*websocket.Conn]struct{}
	pending int
	closing bool
	wg      sync.WaitGroup

	http *http.Server
	ln   net.Listener
}

// New returns the endpoint; it does no I/O.
func New(cfg Config, router *Router, m *Metrics, log *zap.Logger) *Server {
	s := &Server{cfg: cfg, router: router, metrics: m, log: log, limit: logkey.NewLimiter(time.Minute), now: time.Now,
		conns: map[*websocket.Conn]struct{}{}}
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// Activators send no Origin; a browser always does.
		CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" },
	}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: zap.NewStdLog(log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)))}
	return s
}

// Listen binds cfg.Listen and returns the bound address.
func (s *Server) Listen() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("--activator-listen %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	return ln.Addr(), nil
}

// Run serves until ctx ends, then closes every connection with 1012 so the
// activators reconnect to another replica, and waits for their handlers.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWait)
	defer cancel()
	_ = s.http.Shutdown(sctx) // stops accepting; hijacked connections are ours
	s.closeAll()
	if err == nil {
		err = <-errc
	}
	s.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("activator endpoint: %w", err)
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for c := range s.conns {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeServiceRestart, "collector restarting"), time.Now().Add(controlWait))
		_ = c.Close()
	}
}

// ServeHTTP takes one activator connection: the address and connection
// bounds before the upgrade, then frames until the connection ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	addr, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !s.cfg.allowed(addr.Addr()) {
		s.metrics.refused.WithLabelValues(reasonAddress).Inc()
		http.Error(w, "this address may not report stats: see --activator-allowed-cidrs", http.StatusForbidden)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		s.metrics.refused.WithLabelValues(reasonUpgrade).Inc()
		http.Error(w, "want a websocket upgrade: Knative's activator stat protocol", http.StatusBadRequest)
		return
	}
	if !s.reserve() {
		s.metrics.refused.WithLabelValues(reasonConnLimit).Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("this collector holds --activator-max-connections (%d) connections", s.cfg.MaxConnections), http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	conn, err := s.upgrader.Upgrade(w, r, nil) // writes its own error response
	if err != nil {
		s.release(nil)
		s.metrics.refused.WithLabelValues(reasonUpgrade).Inc()
		return
	}
	if !s.add(conn) {
		s.release(nil)
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeServiceRestart, "collector restarting"), time.Now().Add(controlWait))
		_ = conn.Close()
		return
	}
	defer s.release(conn)
	log := s.log.With(zap.String("remote", r.RemoteAddr))
	log.Info("activator connected")
	reason := s.serve(conn, log)
	log.Info("activator disconnected", logkey.Reason(reason))
}

// reserve takes a connection slot (counted in wg) unless the server is
// full or closing; pending counts the slots taken before their upgrade.
func (s *Server) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || len(s.conns)+s.pending >= s.cfg.MaxConnections {
		return false
	}
	s.pending++
	s.wg.Add(1)
	return true
}

// add turns a reserved slot into a held connection.
func (s *Server) add(c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.pending--
	s.conns[c] = struct{}{}
	s.metrics.connections.Inc()
	return true
}

// release gives a slot back: a held connection's, or (c nil) a reserved
// one's.
func (s *Server) release(c *websocket.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == nil {
		s.pending--
		return
	}
	delete(s.conns, c)
	s.metrics.connections.Dec()
	_ = c.Close()
}

// serve reads frames until the connection ends and says why it did.
func (s *Server) serve(conn *websocket.Conn, log *zap.Logger) string {
	conn.SetReadLimit(int64(s.cfg.MaxFrameBytes))
	alive := func() { _ = conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout)) }
	alive()
	conn.SetPingHandler(func(data string) error {
		alive()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(controlWait))
		var ne net.Error
		if errors.Is(err, websocket.ErrCloseSent) || (errors.As(err, &ne) && ne.Timeout()) {
			return nil // as gorilla's default handler: the read reports the end
		}
		return err
	})
	lim := rate.NewLimiter(rate.Limit(s.cfg.StatRate), s.cfg.StatBurst)
	// A frame waits at most --activator-backlog-wait while a decider's
	// backlog is full, and reads nothing meanwhile: no ping is answered.
	// Once a wait has ended in vain the connection is stalled, and its
	// frames do not wait (noWait has ended) until one finds room again:
	// else, with Knative's activator sending a frame a second and the wait
	// 2 s, the unread frames and the pings behind them would fall further
	// behind each second until the activator's pong timeout (10 s) drops
	// the connection.
	ctx := context.Background()
	noWait, cancel := context.WithCancel(ctx)
	cancel()
	stalled := false
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				// gorilla has sent 1009 (message too big) already.
				s.metrics.frames.WithLabelValues(reasonTooBig).Inc()
				log.Warn("activator frame refused; connection closed", zap.Error(commonv1.Invalid("frame", "over the limit", fmt.Sprintf("at most --activator-max-frame-bytes (%d) bytes", s.cfg.MaxFrameBytes))))
				return reasonTooBig
			}
			return err.Error()
		}
		alive()
		if typ != websocket.BinaryMessage {
			s.metrics.frames.WithLabelValues(reasonNotBinary).Inc()
			return s.refuse(conn, log, websocket.CloseUnsupportedData, reasonNotBinary,
				commonv1.Invalid("frame", fmt.Sprintf("websocket message type %d", typ), "binary frames of protobuf WireStatMessages"))
		}
		arrival := s.now().Truncate(time.Second)
		frame, err := Decode(data, s.cfg.MaxMessages)
		if err != nil {
			reason := reasonMalformed
			if !isMalformed(err) {
				reason = reasonTooManyInOne
			}
			s.metrics.frames.WithLabelValues(reason).Inc()
			return s.refuse(conn, log, websocket.ClosePolicyViolation, reason, err)
		}
		s.metrics.count(outcomeInvalid, frame.Invalid)
		s.metrics.count(outcomeNoStat, frame.NoStat)
		if frame.FirstInvalid != nil && s.limit.Allow("invalid", s.now()) {
			log.Warn("activator stats skipped (logged once a minute)", zap.Int("invalid", frame.Invalid), zap.Error(frame.FirstInvalid))
		}
		if !lim.AllowN(s.now(), max(1, len(frame.Stats))) {
			s.metrics.frames.WithLabelValues(reasonRateLimitedFr).Inc()
			s.metrics.count(outcomeRateLimited, len(frame.Stats))
			if s.limit.Allow("rate", s.now()) {
				log.Warn("activator frame dropped: over --activator-stat-rate (logged once a minute)", zap.Int("stats", len(frame.Stats)))
			}
			continue
		}
		if len(frame.Stats) > 0 {
			rctx := ctx
			if stalled {
				rctx = noWait
			}
			stalled = s.router.Route(rctx, arrival, frame.Stats).Backlog > 0
		}
	}
}

// refuse closes the connection with code and err's text (bounded to a
// close frame's 123 bytes) and logs err.
func (s *Server) refuse(conn *websocket.Conn, log *zap.Logger, code int, reason string, err error) string {
	log.Warn("activator frame refused; connection closed", logkey.Reason(reason), zap.Error(err))
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, commonv1.Truncate(err.Error(), 120)), time.Now().Add(controlWait))
	return reason
}
