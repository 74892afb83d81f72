package activator

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/logkey"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Owners names the collector replica owning a target (the holder of its
// bucket's Lease, "" while none holds it) and whether it is this one.
type Owners func(ref *commonv1.TargetRef) (owner string, mine bool)

// Peers calls other collector replicas.
type Peers interface {
	ForwardActivatorStats(ctx context.Context, addr string, req *collectorv1.ForwardActivatorStatsRequest) (*collectorv1.ForwardActivatorStatsResponse, error)
}

// Router sends each stat to the replica owning its target: this one's
// Recorder, or the owner through a Forwarder.
type Router struct {
	resolve Resolver
	owners  Owners
	local   Recorder
	fwd     *Forwarder
	metrics *Metrics
	log     *zap.Logger
	limit   *logkey.Limiter
	now     func() time.Time
}

// NewRouter returns a Router. owners nil means this replica owns every
// target, and fwd may then be nil.
func NewRouter(resolve Resolver, owners Owners, local Recorder, fwd *Forwarder, m *Metrics, log *zap.Logger) *Router {
	return &Router{resolve: resolve, owners: owners, local: local, fwd: fwd, metrics: m, log: log, limit: logkey.NewLimiter(time.Minute), now: time.Now}
}

// Route records or forwards stats that arrived at the second at, and
// returns what became of those this replica records; ctx bounds their wait
// while a decider's backlog is full.
func (r *Router) Route(ctx context.Context, at time.Time, stats []Stat) Counts {
	var (
		refs  = make([]*commonv1.TargetRef, 0, len(stats))
		mine  = make([]Stat, 0, len(stats))
		other = map[string]*collectorv1.ForwardActivatorStatsRequest{}
	)
	for i := range stats {
		s := &stats[i]
		ref, err := r.resolve(s.Namespace, s.Name)
		if err != nil {
			r.metrics.count(outcomeUnresolved, 1)
			if r.limit.Allow("unresolved", r.now()) {
				r.log.Warn("activator stat for a revision with no target; dropped (logged once a minute)", zap.Error(err))
			}
			continue
		}
		owner, ok := "", true
		if r.owners != nil {
			owner, ok = r.owners(ref)
		}
		switch {
		case ok:
			refs = append(refs, ref)
			mine = append(mine, *s)
		case owner == "" || r.fwd == nil:
			// No live holder of the bucket: the next second's stat finds
			// the new one.
			r.metrics.count(outcomeNoOwner, 1)
		default:
			req := other[owner]
			if req == nil {
				req = &collectorv1.ForwardActivatorStatsRequest{ArrivalTime: timestamppb.New(at)}
				other[owner] = req
			}
			req.Stats = append(req.Stats, &collectorv1.Stat{
				Target: ref, PodName: s.PodName,
				AverageConcurrency: s.AverageConcurrency, AverageProxiedConcurrency: s.AverageProxiedConcurrency,
				RequestCount: s.RequestCount, ProxiedRequestCount: s.ProxiedRequestCount,
			})
		}
	}
	for owner, req := range other {
		if !r.fwd.Enqueue(owner, req) {
			r.metrics.count(outcomeForwardDropped, len(req.Stats))
		}
	}
	if len(mine) == 0 {
		return Counts{}
	}
	c := r.local.Record(ctx, at, refs, mine)
	r.metrics.record(c)
	return c
}

func (m *Metrics) record(c Counts) {
	m.count(outcomeRecorded, c.Recorded)
	m.count(outcomeUnknown, c.Unknown)
	m.count(outcomeTargetLimit, c.TargetLimit)
	m.count(outcomeBacklog, c.Backlog)
}

// maxOwners bounds the replicas a Forwarder keeps a queue for: owners come
// from the bucket Leases, not from callers.
const maxOwners = 64

// workerIdle is how long a replica's queue lives without a batch.
const workerIdle = time.Minute

// Forwarder sends batches to owning replicas, one worker and one bounded
// queue per replica, so a slow or dead replica delays only its own stats
// and never the activator connection's reads (and pongs).
type Forwarder struct {
	peers    Peers
	timeout  time.Duration
	queueLen int
	metrics  *Metrics
	log      *zap.Logger
	limit    *logkey.Limiter

	// mu guards ctx, stopped, queues and the workers' start; wg counts
	// the workers.
	mu      sync.Mutex
	ctx     context.Context
	stopped bool
	queues  map[string]chan *collectorv1.ForwardActivatorStatsRequest
	wg      sync.WaitGroup
}

// NewForwarder returns a Forwarder; it forwards once Run has started.
func NewForwarder(cfg Config, peers Peers, m *Metrics, log *zap.Logger) *Forwarder {
	return &Forwarder{peers: peers, timeout: cfg.ForwardTimeout, queueLen: cfg.ForwardQueue, metrics: m, log: log,
		limit: logkey.NewLimiter(time.Minute), queues: map[string]chan *collectorv1.ForwardActivatorStatsRequest{}}
}

// Run lets the Forwarder start workers until ctx ends, then waits for
// them.
func (f *Forwarder) Run(ctx context.Context) error {
	f.mu.Lock()
	f.ctx = ctx
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.stopped = true // no worker starts after this
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// Enqueue queues req for owner; false when it was dropped (queue full,
// too many replicas, not running).
func (f *Forwarder) Enqueue(owner string, req *collectorv1.ForwardActivatorStatsRequest) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx == nil || f.stopped {
		return false
	}
	q, ok := f.queues[owner]
	if !ok {
		if len(f.queues) >= maxOwners {
			return false
		}
		q = make(chan *collectorv1.ForwardActivatorStatsRequest, f.queueLen)
		f.queues[owner] = q
		f.wg.Add(1)
		go f.work(f.ctx, owner, q)
	}
	select {
	case q <- req:
		return true
	default:
		return false
	}
}

func (f *Forwarder) work(ctx context.Context, owner string, q chan *collectorv1.ForwardActivatorStatsRequest) {
	defer f.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-q:
			f.forward(ctx, owner, req)
			idle.Reset(workerIdle)
		case <-idle.C:
			f.mu.Lock()
			if len(q) == 0 {
				delete(f.queues, owner)
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
			idle.Reset(workerIdle)
		}
	}
}

func (f *Forwarder) forward(ctx context.Context, owner string, req *collectorv1.ForwardActivatorStatsRequest) {
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if _, err := f.peers.ForwardActivatorStats(cctx, owner, req); err != nil {
		f.metrics.count(outcomeForwardFailed, len(req.Stats))
		if ctx.Err() == nil && f.limit.Allow(owner, time.Now()) {
			f.log.Warn("forwarding activator stats to the owning collector failed; dropped (logged once a minute per owner)",
				zap.String("owner", owner), zap.Int("stats", len(req.Stats)), zap.Error(err))
		}
		return
	}
	f.metrics.count(outcomeForwarded, len(req.Stats))
}
