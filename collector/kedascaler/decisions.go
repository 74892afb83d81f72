package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Conditions Decisions reports; the server maps them to status codes.
var (
	// ErrUnknownTarget: the owning decider holds no such target.
	ErrUnknownTarget = errors.New("tidal holds no such target")
	// ErrUnavailable: no decider could be asked (none known, no
	// connection, or the call failed).
	ErrUnavailable = errors.New("decider unavailable")
	// ErrNoDecision: the target has no valid decision yet (desired
	// replicas -1), so nothing true can be said of it.
	ErrNoDecision = errors.New("no decision yet")
	// ErrTooManyWatches: a new watch would pass Config.MaxWatches.
	ErrTooManyWatches = errors.New("too many watches of deciders")
)

// Decisions reads a target's decisions from the decider that owns it.
type Decisions interface {
	// Latest returns the target's latest valid decision, or an error
	// wrapping ErrUnknownTarget, ErrUnavailable or ErrNoDecision.
	Latest(ctx context.Context, ref *commonv1.TargetRef) (*commonv1.Decision, error)
	// Watch follows the target's decisions, from its owning decider
	// whichever that is, until the Watch is closed.
	Watch(ref *commonv1.TargetRef) (Watch, error)
}

// Watch is one target's decisions as they arrive.
type Watch interface {
	// Changed has a token when Decision may have changed.
	Changed() <-chan struct{}
	// Decision is the newest decision seen (by sequence), nil before any.
	Decision() *commonv1.Decision
	// Close ends the watch.
	Close()
}

// Router finds a target's owning decider and a connection to it: the
// collector's own streams to its deciders.
type Router interface {
	// Owner returns the address of the decider that owns ref; false when no
	// decider is known.
	Owner(ref *commonv1.TargetRef) (addr string, ok bool)
	// Conn returns the connection to the decider at addr; false when there
	// is none (addr is no longer a decider endpoint).
	Conn(addr string) (grpc.ClientConnInterface, bool)
}

// Remote is Decisions over the deciders' gRPC API. The watches of one
// decider and namespace share one WatchDecisions stream, so KEDA's streams
// cost each decider a bounded number of watchers whatever their number.
type Remote struct {
	cfg    Config
	router Router
	log    *zap.Logger

	refused  prometheus.Counter
	reopened prometheus.Counter

	// mu guards everything below and each upstream's subscribers.
	mu  sync.Mutex
	ctx context.Context // set by Run; nil before
	// stopped is set once Run is stopping: no stream starts after it.
	stopped bool
	ups     map[upKey]*upstream
	// watches are the open watches, for the owner check.
	watches map[*watch]struct{}
	wg      sync.WaitGroup
}

// upKey names one shared WatchDecisions stream.
type upKey struct{ addr, namespace string }

type upstream struct {
	key    upKey
	cancel context.CancelFunc
	// subs are the watches on this stream by target key, none empty.
	// Guarded by Remote.mu.
	subs map[string]map[*watch]struct{}
}

type watch struct {
	r       *Remote
	ref     *commonv1.TargetRef
	key     string
	changed chan struct{}
	// up is the stream the watch is on, nil while its owner is unknown or
	// the bound left no room. Guarded by Remote.mu.
	up *upstream

	// mu guards dec and closed.
	mu     sync.Mutex
	dec    *commonv1.Decision
	closed bool
}

// NewRemote returns a Remote; nothing is watched before Run.
func NewRemote(cfg Config, router Router, reg prometheus.Registerer, log *zap.Logger) *Remote {
	r := &Remote{cfg: cfg, router: router, log: log, ups: map[upKey]*upstream{}, watches: map[*watch]struct{}{}}
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_collector_keda_decider_watches",
		Help: "WatchDecisions streams open to deciders for KEDA's StreamIsActive (one per decider and namespace).",
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.ups))
	})
	r.refused = f.NewCounter(prometheus.CounterOpts{
		Name: "tidal_collector_keda_decider_watches_refused_total",
		Help: "Decider watches not opened because --keda-max-watches were open.",
	})
	r.reopened = f.NewCounter(prometheus.CounterOpts{
		Name: "tidal_collector_keda_decider_watches_reopened_total",
		Help: "Decider watches reopened after they broke.",
	})
	return r
}

// Latest asks the owning decider for the target's latest decision.
func (r *Remote) Latest(ctx context.Context, ref *commonv1.TargetRef) (*commonv1.Decision, error) {
	addr, ok := r.router.Owner(ref)
	if !ok {
		return nil, fmt.Errorf("%w: this collector knows no decider", ErrUnavailable)
	}
	conn, ok := r.router.Conn(addr)
	if !ok {
		return nil, fmt.Errorf("%w: no connection to decider %s", ErrUnavailable, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	resp, err := deciderv1.NewDeciderServiceClient(conn).GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: ref})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound:
		return nil, fmt.Errorf("%w: decider %s: %s", ErrUnknownTarget, addr, deciderMessage(err))
	default:
		return nil, fmt.Errorf("%w: decider %s: %s", ErrUnavailable, addr, deciderMessage(err))
	}
	d := resp.GetDecision()
	if d.GetDesiredReplicas() < 0 {
		return nil, fmt.Errorf("%w (decider %s)", ErrNoDecision, addr)
	}
	return d, nil
}

// deciderMessage is a bounded, printable account of a decider's error.
func deciderMessage(err error) string {
	s := status.Convert(err)
	return s.Code().String() + ": " + commonv1.Printable(commonv1.Truncate(s.Message(), 256))
}

// Watch follows ref's decisions. It fails with ErrUnavailable before Run
// and with ErrTooManyWatches when ref needs a new shared stream and
// Config.MaxWatches are open.
func (r *Remote) Watch(ref *commonv1.TargetRef) (Watch, error) {
	w := &watch{r: r, ref: ref, key: ref.Key(), changed: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.stopped {
		return nil, fmt.Errorf("%w: the collector is not running", ErrUnavailable)
	}
	if err := r.placeLocked(w); err != nil {
		return nil, err
	}
	r.watches[w] = struct{}{}
	return w, nil
}

// placeLocked puts w on the stream of its owning decider, leaving the
// stream it was on if the owner changed. With no owner known, w waits off
// any stream for the next owner check.
func (r *Remote) placeLocked(w *watch) error {
	addr, ok := r.router.Owner(w.ref)
	if !ok {
		r.leaveLocked(w)
		return nil
	}
	key := upKey{addr: addr, namespace: w.ref.GetNamespace()}
	if w.up != nil && w.up.key == key {
		return nil
	}
	up := r.ups[key]
	if up == nil {
		if r.stopped {
			return fmt.Errorf("%w: the collector is stopping", ErrUnavailable)
		}
		if len(r.ups) >= r.cfg.MaxWatches {
			r.refused.Inc()
			return fmt.Errorf("%w (at most %d, one per decider and namespace)", ErrTooManyWatches, r.cfg.MaxWatches)
		}
		ctx, cancel := context.WithCancel(r.ctx)
		up = &upstream{key: key, cancel: cancel, subs: map[string]map[*watch]struct{}{}}
		r.ups[key] = up
		r.wg.Go(func() { r.runUpstream(ctx, up) })
	}
	r.leaveLocked(w)
	if up.subs[w.key] == nil {
		up.subs[w.key] = map[*watch]struct{}{}
	}
	up.subs[w.key][w] = struct{}{}
	w.up = up
	return nil
}

// leaveLocked takes w off its stream, and ends the stream when it was the
// last watch on it.
func (r *Remote) leaveLocked(w *watch) {
	up := w.up
	if up == nil {
		return
	}
	w.up = nil
	if s := up.subs[w.key]; s != nil {
		delete(s, w)
		if len(s) == 0 {
			delete(up.subs, w.key)
		}
	}
	if len(up.subs) == 0 {
		up.cancel()
		delete(r.ups, up.key)
	}
}

// Run keeps the watches on their owners' streams until ctx ends, then
// returns once every stream has stopped.
func (r *Remote) Run(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	wait.UntilWithContext(ctx, func(context.Context) { r.checkOwners() }, r.cfg.OwnerCheck)
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// checkOwners moves every watch whose target changed owner (a decider came
// or went) to its new owner's stream.
func (r *Remote) checkOwners() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.watches {
		// A refusal (the bound) leaves w where it was; the next check
		// tries again.
		_ = r.placeLocked(w)
	}
}

// runUpstream keeps one WatchDecisions stream open until ctx ends (its last
// watch left, or Run's context ended), reopening it after failures.
func (r *Remote) runUpstream(ctx context.Context, up *upstream) {
	log := r.log.With(logkey.Decider(up.key.addr), zap.String("namespace", up.key.namespace))
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: r.cfg.MinBackoff, Factor: 2, Steps: math.MaxInt32, Cap: r.cfg.MaxBackoff}
	}
	backoff := newBackoff()
	for {
		delivered, err := r.watchOnce(ctx, up)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			backoff = newBackoff()
		}
		r.reopened.Inc()
		after := backoff.Step()
		log.Info("decider watch for KEDA broke; reopening", zap.Error(err), zap.Duration("after", after))
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchOnce runs one stream; delivered says whether it carried anything.
func (r *Remote) watchOnce(ctx context.Context, up *upstream) (delivered bool, err error) {
	conn, ok := r.router.Conn(up.key.addr)
	if !ok {
		return false, errors.New("no connection to the decider")
	}
	st, err := deciderv1.NewDeciderServiceClient(conn).WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: up.key.namespace})
	if err != nil {
		return false, fmt.Errorf("open: %w", err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, fmt.Errorf("receive: %w", err)
		}
		delivered = true
		r.deliver(up, resp.GetDecision())
	}
}

// deliver hands d to the watches of its target on up.
func (r *Remote) deliver(up *upstream, d *commonv1.Decision) {
	key := d.GetTarget().Key()
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range up.subs[key] {
		w.offer(d)
	}
}

// offer keeps d if it is newer than what w holds, and signals.
func (w *watch) offer(d *commonv1.Decision) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || (w.dec != nil && d.GetSequence() <= w.dec.GetSequence()) {
		return
	}
	w.dec = d
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watch) Changed() <-chan struct{} { return w.changed }

func (w *watch) Decision() *commonv1.Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dec
}

func (w *watch) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	delete(w.r.watches, w)
	w.r.leaveLocked(w)
}
