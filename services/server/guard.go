package server

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/logkey"
)

// maxTrackedIdentities bounds the rate limiter's buckets. Only callers the
// policy allowed reach it, so in practice it holds the few configured
// identities; the bound only stops a misconfiguration from growing it.
const maxTrackedIdentities = 1024

// refusalLogPeriod is how often one caller's refusals of one method are
// logged; every refusal is counted.
const refusalLogPeriod = 10 * time.Second

// guard is the interceptor that checks who calls: the caller's identity
// against the policy, then its rate of mutating calls. A nil policy (no
// TLS) lets every call through.
type guard struct {
	policy     *policy
	commonName bool
	// limiter bounds mutating calls, reads reads, per identity; nil
	// means no bound.
	limiter  *rateLimiter
	reads    *rateLimiter
	log      *zap.Logger
	logLimit *logkey.Limiter
	refused  *prometheus.CounterVec
	now      func() time.Time
}

func newGuard(cfg Config, log *zap.Logger, reg prometheus.Registerer) *guard {
	g := &guard{
		log:      log,
		logLimit: logkey.NewLimiter(refusalLogPeriod),
		now:      time.Now,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_grpc_refused_total",
			Help: "gRPC calls refused before their handler, by method, caller role (collector, decider, actuator, pusher, operator, keda, deployer, reader, other, unknown) and reason (permission_denied, namespace, rate_limited).",
		}, []string{"method", "role", "reason"}),
	}
	reg.MustRegister(g.refused)
	if !cfg.TLS.Enabled() {
		log.Warn("gRPC is PLAINTEXT: callers are not authenticated and anyone who reaches the port may call every method, Scale included; use it only for local development and set --tls-cert-file, --tls-key-file and --tls-ca-file anywhere else")
		return g
	}
	p := cfg.Authz.policy
	if p == nil {
		var err error
		if p, err = cfg.Authz.build(); err != nil {
			// Validate would have refused it; fail closed.
			log.Error("authorization policy unusable; refusing every call", zap.Error(err))
			p = &policy{trustDomain: "", roles: map[string]Role{}, named: map[string]bool{}, bound: map[string]map[string]bool{}, ruled: map[string]bool{}}
		}
	}
	g.policy = p
	g.commonName = cfg.Authz.CommonName
	if cfg.Authz.MutatingRate > 0 {
		g.limiter = newRateLimiter(rate.Limit(cfg.Authz.MutatingRate), cfg.Authz.MutatingBurst, maxTrackedIdentities)
	}
	if cfg.Authz.ReadRate > 0 {
		g.reads = newRateLimiter(rate.Limit(cfg.Authz.ReadRate), cfg.Authz.ReadBurst, maxTrackedIdentities)
	}
	return g
}

// verdict is an allowed call's caller and the namespaces its requests
// may name.
type verdict struct {
	caller string
	scope  map[string]bool
}

// check refuses a call the caller may not make, or may not make now; an
// allowed call's context carries the caller's identity (Caller), and its
// verdict says what its requests may name.
func (g *guard) check(ctx context.Context, method string) (context.Context, verdict, error) {
	if g.policy == nil {
		return ctx, verdict{}, nil
	}
	id, idErr := peerIdentity(ctx, g.commonName)
	d := g.policy.decide(method, id, idErr)
	caller := id.String()
	if idErr != nil {
		caller = "(no identity)"
	}
	if !d.allowed {
		g.refused.WithLabelValues(method, d.label, "permission_denied").Inc()
		if g.logLimit.Allow("denied "+method+" "+caller, g.now()) {
			g.log.Warn("call refused: caller may not call this method",
				zap.String("method", method), zap.String("caller", identity.Quote(caller)), zap.String("role", d.label), zap.String("reason", d.reason))
		}
		return ctx, verdict{}, status.Errorf(codes.PermissionDenied, "%s: caller %s may not call it: %s", method, identity.Quote(caller), d.reason)
	}
	limiter, kind := g.limiter, "mutating calls"
	if d.read {
		limiter, kind = g.reads, "reads"
	}
	if d.limited && limiter != nil && !limiter.allow(caller, g.now()) {
		g.refused.WithLabelValues(method, d.label, "rate_limited").Inc()
		if g.logLimit.Allow("limited "+kind+" "+caller, g.now()) {
			g.log.Warn("call refused: caller over its rate of "+kind,
				zap.String("method", method), zap.String("caller", identity.Quote(caller)), zap.String("role", d.label), zap.Float64("rate", float64(limiter.rate)))
		}
		return ctx, verdict{}, status.Errorf(codes.ResourceExhausted, "%s: caller %s is over %g %s per second; retry later", method, identity.Quote(caller), float64(limiter.rate), kind)
	}
	if idErr == nil {
		ctx = withCaller(ctx, caller)
	}
	return ctx, verdict{caller: caller, scope: d.scope}, nil
}

// checkRequest refuses a request naming a namespace outside the caller's
// scope, counting and logging it as check does.
func (g *guard) checkRequest(method string, v verdict, req any) error {
	err := checkScope(method, v.caller, req, v.scope)
	if err == nil {
		return nil
	}
	role := g.policy.roles[v.caller].label()
	g.refused.WithLabelValues(method, role, "namespace").Inc()
	if g.logLimit.Allow("namespace "+method+" "+v.caller, g.now()) {
		g.log.Warn("call refused: request outside the caller's namespaces",
			zap.String("method", method), zap.String("caller", identity.Quote(v.caller)), zap.String("role", role), zap.String("reason", status.Convert(err).Message()))
	}
	return err
}

func (g *guard) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, v, err := g.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if v.scope != nil {
			if err := g.checkRequest(info.FullMethod, v, req); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

func (g *guard) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, v, err := g.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		w := middleware.WrapServerStream(ss)
		w.WrappedContext = ctx
		if v.scope == nil {
			return handler(srv, w)
		}
		return handler(srv, &scopedStream{WrappedServerStream: w, g: g, method: info.FullMethod, v: v})
	}
}

// scopedStream checks every message a namespace-bound caller sends.
type scopedStream struct {
	*middleware.WrappedServerStream
	g      *guard
	method string
	v      verdict
}

func (s *scopedStream) RecvMsg(m any) error {
	if err := s.WrappedServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.checkRequest(s.method, s.v, m)
}

// errNoClientCert is a caller without a verified certificate; the TLS
// handshake requires one, so only a misconfigured server sees it.
var errNoClientCert = errors.New("no verified client certificate")

// peerIdentity is the SPIFFE ID of the caller's verified certificate.
func peerIdentity(ctx context.Context, commonName bool) (identity.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return identity.ID{}, errNoClientCert
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return identity.ID{}, errNoClientCert
	}
	return identity.FromCertificate(info.State.VerifiedChains[0][0], commonName)
}

// rateLimiter is a token bucket per identity, at most max of them; the
// least recently used is forgotten first.
type rateLimiter struct {
	rate  rate.Limit
	burst int
	max   int

	// mu guards byKey and order, which hold the same entries.
	mu    sync.Mutex
	byKey map[string]*list.Element
	order *list.List // of *bucketEntry, most recently used first
}

type bucketEntry struct {
	key     string
	limiter *rate.Limiter
}

func newRateLimiter(r rate.Limit, burst, maxKeys int) *rateLimiter {
	return &rateLimiter{rate: r, burst: burst, max: maxKeys, byKey: map[string]*list.Element{}, order: list.New()}
}

// allow takes one token of key's bucket at now, if it has one.
func (l *rateLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.byKey[key]
	if ok {
		l.order.MoveToFront(el)
	} else {
		if l.order.Len() >= l.max {
			oldest := l.order.Back()
			l.order.Remove(oldest)
			delete(l.byKey, oldest.Value.(*bucketEntry).key)
		}
		el = l.order.PushFront(&bucketEntry{key: key, limiter: rate.NewLimiter(l.rate, l.burst)})
		l.byKey[key] = el
	}
	return el.Value.(*bucketEntry).limiter.AllowN(now, 1)
}

// len is how many identities are tracked.
func (l *rateLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
