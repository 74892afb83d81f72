package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/validator"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Server owns one binary's gRPC server and HTTP port. Its life has three
// steps: New (no I/O; register handlers on GRPC()), Listen (binds both
// ports), Run (serves until the context ends, then shuts down in order).
type Server struct {
	cfg     Config
	log     *zap.Logger
	grpc    *grpc.Server
	health  *health.Server
	metrics *grpcprom.ServerMetrics

	grpcLis net.Listener
	httpLis net.Listener
	http    *http.Server

	// ready is what /readyz and the health service report; the binary sets
	// it once its components are primed.
	ready atomic.Bool
}

// New builds a server. reg receives the gRPC metrics and the Go and process
// collectors, and is what /metrics serves. cfg must have passed Validate.
func New(cfg Config, log *zap.Logger, reg *prometheus.Registry) *Server {
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		log.Info("Go memory limit", zap.Int64("bytes", limit)) // Main's SetMemoryLimit, or GOMEMLIMIT
	}
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The chain runs outermost first. Recovery is outermost so a panic
	// anywhere below, logging included, becomes an INTERNAL status instead of
	// killing the process; logging and metrics come next so refused requests
	// are logged and counted too; then the guard checks who calls, before
	// anything reads the request; validation is last, right before the handler.
	logger := interceptorLogger(log)
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLevel),
	}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		// The panic's details are for the log only: a caller may be anyone.
		log.Error("panic in gRPC handler", zap.Any("panic", p), zap.Stack("stack"))
		return status.Error(codes.Internal, "internal error")
	})
	g := newGuard(cfg, log, reg)
	opts := tlsOpts(cfg.TLS, log)
	if cfg.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(min(cfg.MaxConcurrentStreams, math.MaxUint32))))
	}
	opts = append(opts, connOpts(cfg.Conn)...)
	s := &Server{
		cfg:     cfg,
		log:     log,
		health:  health.NewServer(),
		metrics: metrics,
		grpc: grpc.NewServer(append(opts,
			grpc.ChainUnaryInterceptor(
				recovery.UnaryServerInterceptor(recoverOpt),
				logging.UnaryServerInterceptor(logger, logOpts...),
				metrics.UnaryServerInterceptor(),
				g.unary(),
				validator.UnaryServerInterceptor(),
			),
			grpc.ChainStreamInterceptor(
				recovery.StreamServerInterceptor(recoverOpt),
				logging.StreamServerInterceptor(logger, logOpts...),
				metrics.StreamServerInterceptor(),
				g.stream(),
				validator.StreamServerInterceptor(),
			),
		)...),
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A CPU profile takes 30 s by default.
		WriteTimeout:   2 * time.Minute,
		IdleTimeout:    time.Minute,
		MaxHeaderBytes: 16 << 10,
	}
	return s
}

// connOpts are the keepalive and idle policies of a gRPC server. A zero
// ConnConfig (tests building a Config by hand) keeps gRPC's defaults.
func connOpts(c ConnConfig) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if c.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(c.HandshakeTimeout))
	}
	if c.MaxIdle > 0 || c.KeepaliveTime > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: c.MaxIdle, Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout,
		}))
	}
	if c.MinPingInterval > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.MinPingInterval, PermitWithoutStream: true}))
	}
	return opts
}

// limit bounds the connections l accepts at once; 0 is no bound.
func limit(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return netutil.LimitListener(l, n)
}

// tlsOpts returns the server's TLS option, if any. Validate has loaded the
// files already, so a failure here means they changed since; the server
// then refuses every connection rather than falling back to plaintext.
func tlsOpts(c TLSConfig, log *zap.Logger) []grpc.ServerOption {
	if !c.Enabled() {
		return nil
	}
	opt, err := c.serverOption()
	if err != nil {
		log.Error("TLS credentials unusable; refusing connections", zap.Error(err))
		return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13}))}
	}
	return []grpc.ServerOption{opt}
}

// GRPC is the server to register handlers on, before Run.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Listen binds the gRPC and HTTP ports. Port 0 picks a free port; the
// addresses actually bound are returned.
func (s *Server) Listen() (grpcAddr, httpAddr net.Addr, err error) {
	s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen grpc %s: %w", s.cfg.GRPCAddr, err)
	}
	s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		_ = s.grpcLis.Close()
		return nil, nil, fmt.Errorf("listen http %s: %w", s.cfg.HTTPAddr, err)
	}
	s.grpcLis = limit(s.grpcLis, s.cfg.Conn.MaxConnections)
	s.httpLis = limit(s.httpLis, s.cfg.Conn.HTTPMaxConnections)
	// Handlers are registered by now: give each service its health status.
	s.SetReady(s.ready.Load())
	return s.grpcLis.Addr(), s.httpLis.Addr(), nil
}

// SetReady sets what /readyz and the gRPC health service report. The
// health status covers the server as a whole ("") and every registered service.
func (s *Server) SetReady(ready bool) {
	s.ready.Store(ready)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, st)
	}
}

// Run serves until ctx ends or a listener fails, then shuts down in order:
// report not ready, let in-flight calls finish for ShutdownGrace, force-stop
// what is left, close the HTTP port. A requested shutdown returns nil.
func (s *Server) Run(ctx context.Context) error {
	if s.grpcLis == nil {
		if _, _, err := s.Listen(); err != nil {
			return err
		}
	}
	s.metrics.InitializeMetrics(s.grpc)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.grpcLis); err != nil {
			return fmt.Errorf("serve grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.http.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		s.shutdown()
		return nil
	})
	s.log.Info("serving", zap.Stringer("grpc", s.grpcLis.Addr()), zap.Stringer("http", s.httpLis.Addr()))
	return g.Wait()
}

func (s *Server) shutdown() {
	s.SetReady(false)
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn("shutdown grace over; stopping in-flight calls", zap.Duration("grace", s.cfg.ShutdownGrace))
		s.grpc.Stop()
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.http.Shutdown(ctx)
	s.log.Info("stopped")
}

// callLevel logs successful calls at debug: deciders call Scale every tick
// for every target, and info-level lines for each would drown real events.
func callLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists:
		return logging.LevelDebug
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated, codes.PermissionDenied:
		return logging.LevelInfo
	case codes.Unknown, codes.Internal, codes.DataLoss, codes.Unimplemented:
		return logging.LevelError
	default:
		return logging.LevelWarn
	}
}

// interceptorLogger adapts zap to the middleware's logger; fields arrive as
// alternating keys and values, as zap's sugared logger takes them.
func interceptorLogger(l *zap.Logger) logging.Logger {
	s := l.WithOptions(zap.AddCallerSkip(1)).Sugar()
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		switch lvl {
		case logging.LevelDebug:
			s.Debugw(msg, fields...)
		case logging.LevelInfo:
			s.Infow(msg, fields...)
		case logging.LevelWarn:
			s.Warnw(msg, fields...)
		default:
			s.Errorw(msg, fields...)
		}
	})
}
