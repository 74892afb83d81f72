package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/utils/lru"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/logkey"
)

// maxTrackedIdentities bounds the rate limiter's buckets. Only callers the
// policy allowed reach it, so in practice it holds the few configured
// identities; the bound only stops a misconfiguration from growing it.
const maxTrackedIdentities = 1024

// maxTrackedNamespaces bounds the per-namespace read buckets and watch
// counts: an identity that may read every namespace can name any, so
// beyond it the least recently used bucket is forgotten (its next read
// starts full; the identity's own bucket still bounds it) and a watch
// about one more namespace is refused.
const maxTrackedNamespaces = 16384

// refusalLogPeriod is how often one caller's refusals of one method are
// logged; every refusal is counted.
const refusalLogPeriod = 10 * time.Second

// guard is the interceptor that checks who calls: the caller's identity
// against the policy, then its rate of mutating calls. A nil policy (no
// TLS) lets every call through.
type guard struct {
	policy *policy
	// mutating and reads are the budgets of mutating calls and of reads;
	// watches bounds the watch streams open per identity and namespace
	// and per namespace, nil meaning no bound.
	mutating budget
	reads    budget
	watches  *watchCounts
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
		refused: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_grpc_refused_total",
			Help: "gRPC calls refused before their handler, by method, caller role (collector, decider, actuator, pusher, operator, keda, deployer, reader, other, unknown) and reason (permission_denied, namespace, rate_limited, namespace_rate_limited, watch_limited).",
		}, []string{"method", "role", "reason"}),
	}
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
	a := cfg.Authz
	g.mutating = newBudget("mutating calls", "authz-mutating-rate", a.MutatingRate, a.MutatingBurst, "authz-namespace-mutating-rate", a.NamespaceMutatingRate, a.NamespaceMutatingBurst)
	g.reads = newBudget("reads", "authz-read-rate", a.ReadRate, a.ReadBurst, "authz-namespace-read-rate", a.NamespaceReadRate, a.NamespaceReadBurst)
	if cfg.Authz.NamespaceWatchesPerCaller > 0 || cfg.Authz.NamespaceWatches > 0 {
		g.watches = newWatchCounts(cfg.Authz.NamespaceWatchesPerCaller, cfg.Authz.NamespaceWatches, maxTrackedNamespaces)
	}
	return g
}

// budget is a token bucket per identity and one per identity and
// namespace, for one kind of call; a nil bucket is no bound.
type budget struct {
	kind               string
	perCaller, perNS   *rateLimiter
	callerFlag, nsFlag string
}

func newBudget(kind, callerFlag string, callerRate float64, callerBurst int, nsFlag string, nsRate float64, nsBurst int) budget {
	b := budget{kind: kind, callerFlag: callerFlag, nsFlag: nsFlag}
	if callerRate > 0 {
		b.perCaller = newRateLimiter(rate.Limit(callerRate), callerBurst, maxTrackedIdentities)
	}
	if nsRate > 0 {
		b.perNS = newRateLimiter(rate.Limit(nsRate), nsBurst, maxTrackedNamespaces)
	}
	return b
}

// verdict is an allowed call's caller and the namespaces its requests
// may name.
type verdict struct {
	caller string
	scope  map[string]bool
	// role is the caller's bounded metric label.
	role string
	// charge is the budget the call spends once its request names the
	// namespace it is about (charge); nil when nothing is left to charge.
	charge *budget
	// read says the call is a read, which a watch stream is.
	read bool
}

// check refuses a call the caller may not make, or may not make now; an
// allowed call's context carries the caller's identity (Caller), and its
// verdict says what its requests may name and what budget the call is
// still to spend.
func (g *guard) check(ctx context.Context, method string) (context.Context, verdict, error) {
	if g.policy == nil {
		return ctx, verdict{}, nil
	}
	id, idErr := peerIdentity(ctx)
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
	v := verdict{caller: caller, scope: d.scope, role: d.label, read: d.read}
	switch {
	case !d.limited:
	case d.read:
		if g.reads.perCaller != nil || g.reads.perNS != nil || g.watches != nil {
			v.charge = &g.reads
		}
	case d.service || g.mutating.perNS == nil:
		// tidal's own services have no budget per namespace: the
		// caller's own is spent at once.
		if err := g.spend(method, v, &g.mutating, "", false); err != nil {
			return ctx, verdict{}, err
		}
	default:
		v.charge = &g.mutating
	}
	if idErr == nil {
		ctx = withCaller(ctx, caller)
	}
	return ctx, v, nil
}

// charge spends one call of v's caller about namespace ns ("" for every
// namespace) from v's budget: from the caller's budget for ns first, so
// that a flood about one namespace is refused there before it spends the
// caller's own budget, which its calls about other namespaces need.
func (g *guard) charge(method string, v verdict, ns string) error {
	if v.charge == nil {
		return nil
	}
	return g.spend(method, v, v.charge, ns, true)
}

// spend takes a token of v's caller from b: about ns first when perNS.
func (g *guard) spend(method string, v verdict, b *budget, ns string, perNS bool) error {
	now := g.now()
	if l := b.perNS; perNS && l != nil && !l.allow(v.caller+"\x00"+ns, now) {
		return g.exhausted(method, v, "namespace_rate_limited", "over its rate of "+b.kind+" about one namespace",
			status.Errorf(codes.ResourceExhausted, "%s: caller %s is over %g %s per second about %s (--%s); retry later", method, identity.Quote(v.caller), float64(l.rate), b.kind, namespaceText(ns), b.nsFlag))
	}
	if l := b.perCaller; l != nil && !l.allow(v.caller, now) {
		return g.exhausted(method, v, "rate_limited", "over its rate of "+b.kind,
			status.Errorf(codes.ResourceExhausted, "%s: caller %s is over %g %s per second (--%s); retry later", method, identity.Quote(v.caller), float64(l.rate), b.kind, b.callerFlag))
	}
	return nil
}

// namespaceText names ns in a refusal.
func namespaceText(ns string) string {
	if ns == "" {
		return "every namespace"
	}
	return "namespace " + identity.Quote(ns)
}

// exhausted counts and logs a call refused for a budget, and returns err.
func (g *guard) exhausted(method string, v verdict, reason, what string, err error) error {
	g.refused.WithLabelValues(method, v.role, reason).Inc()
	if g.logLimit.Allow(reason+" "+v.caller, g.now()) {
		g.log.Warn("call refused: caller "+what,
			zap.String("method", method), zap.String("caller", identity.Quote(v.caller)), zap.String("role", v.role), zap.String("reason", status.Convert(err).Message()))
	}
	return err
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
		if err := g.charge(info.FullMethod, v, requestNamespace(req)); err != nil {
			return nil, err
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
		if info.IsClientStream {
			// Its requests come later, if ever, and may name several
			// namespaces: charged when opened, about every namespace.
			if err := g.charge(info.FullMethod, v, ""); err != nil {
				return err
			}
			v.charge = nil
		}
		if v.scope == nil && v.charge == nil {
			return handler(srv, w)
		}
		s := &checkedStream{WrappedServerStream: w, g: g, method: info.FullMethod, v: v, watch: v.read && g.watches != nil && isWatch(info.FullMethod)}
		defer s.done()
		return handler(srv, s)
	}
}

// isWatch says whether method is a watch of tidal's services
// (WatchDecisions): a stream its caller holds open, counted per caller
// and namespace. Health's Watch is not: kubelets and load balancers use it.
func isWatch(method string) bool {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return ok && strings.HasPrefix(svc, "tidal.") && strings.HasPrefix(name, "Watch")
}

// checkedStream checks every message a namespace-bound caller sends, and
// charges a stream's budget when its one request arrives: the request
// names the namespace it is about.
type checkedStream struct {
	*middleware.WrappedServerStream
	g      *guard
	method string
	v      verdict
	// watch says the stream takes a watch slot of its caller and
	// namespace, held until the handler returns.
	watch bool
	// charged is set once the call is charged; release frees the watch
	// slot taken, if any.
	charged bool
	release func()
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.WrappedServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.v.scope != nil {
		if err := s.g.checkRequest(s.method, s.v, m); err != nil {
			return err
		}
	}
	if s.v.charge == nil || s.charged {
		return nil
	}
	s.charged = true
	ns := requestNamespace(m)
	if err := s.g.charge(s.method, s.v, ns); err != nil {
		return err
	}
	if !s.watch {
		return nil
	}
	release, err := s.g.watches.acquire(s.v.caller, ns)
	if err != nil {
		return s.g.exhausted(s.method, s.v, "watch_limited", "over its watch streams about one namespace",
			status.Errorf(codes.ResourceExhausted, "%s: caller %s: %v; close a watch or retry later", s.method, identity.Quote(s.v.caller), err))
	}
	s.release = release
	return nil
}

// done frees what the stream held once its handler returned.
func (s *checkedStream) done() {
	if s.release != nil {
		s.release()
	}
}

// errNoClientCert is a caller without a verified certificate; the TLS
// handshake requires one, so only a misconfigured server sees it.
var errNoClientCert = errors.New("no verified client certificate")

// peerIdentity is the SPIFFE ID of the caller's verified certificate.
func peerIdentity(ctx context.Context) (identity.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return identity.ID{}, errNoClientCert
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return identity.ID{}, errNoClientCert
	}
	return identity.FromCertificate(info.State.VerifiedChains[0][0])
}

// rateLimiter is a token bucket per identity, at most maxKeys of them; the
// least recently used is forgotten first.
type rateLimiter struct {
	rate  rate.Limit
	burst int

	// mu makes finding or adding a key's bucket one step.
	mu      sync.Mutex
	buckets *lru.Cache // of *rate.Limiter
}

func newRateLimiter(r rate.Limit, burst, maxKeys int) *rateLimiter {
	return &rateLimiter{rate: r, burst: burst, buckets: lru.New(maxKeys)}
}

// allow takes one token of key's bucket at now, if it has one.
func (l *rateLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets.Get(key)
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets.Add(key, b)
	}
	return b.(*rate.Limiter).AllowN(now, 1)
}

// len is how many identities are tracked.
func (l *rateLimiter) len() int { return l.buckets.Len() }

// watchCounts counts the watch streams open per caller and namespace and
// per namespace; an entry lives while a stream it counts is open, and at
// most maxKeys of each are held.
type watchCounts struct {
	// perCaller and perNamespace bound the counts; 0 is no bound.
	perCaller, perNamespace, maxKeys int

	// mu guards byCaller (keyed caller NUL namespace) and byNamespace.
	mu          sync.Mutex
	byCaller    map[string]int
	byNamespace map[string]int
}

func newWatchCounts(perCaller, perNamespace, maxKeys int) *watchCounts {
	return &watchCounts{perCaller: perCaller, perNamespace: perNamespace, maxKeys: maxKeys, byCaller: map[string]int{}, byNamespace: map[string]int{}}
}

// acquire takes a watch slot of caller about ns ("" for every namespace),
// or says which bound refuses it; release gives the slot back, once.
func (w *watchCounts) acquire(caller, ns string) (release func(), err error) {
	key := caller + "\x00" + ns
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.perCaller > 0 && w.byCaller[key] >= w.perCaller:
		return nil, fmt.Errorf("%d watch streams open about %s (--authz-namespace-watches-per-caller)", w.perCaller, namespaceText(ns))
	case w.perNamespace > 0 && w.byNamespace[ns] >= w.perNamespace:
		return nil, fmt.Errorf("all callers hold %d watch streams open about %s (--authz-namespace-watches)", w.perNamespace, namespaceText(ns))
	case w.byCaller[key] == 0 && len(w.byCaller) >= w.maxKeys, w.byNamespace[ns] == 0 && len(w.byNamespace) >= w.maxKeys:
		return nil, fmt.Errorf("watch streams open about %d namespaces, the most tracked (--authz-namespace-watches)", w.maxKeys)
	}
	w.byCaller[key]++
	w.byNamespace[ns]++
	return sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.byCaller[key]--; w.byCaller[key] <= 0 {
			delete(w.byCaller, key)
		}
		if w.byNamespace[ns]--; w.byNamespace[ns] <= 0 {
			delete(w.byNamespace, ns)
		}
	}), nil
}
