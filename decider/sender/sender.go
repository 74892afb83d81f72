// Package sender delivers a decider's decisions to the actuator's Scale RPC:
// concurrently across targets, one call at a time per target, only a
// target's newest decision, wakes from zero and scale-ups first.
package sender

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/util/workqueue"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/fairqueue"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Config configures a Sender.
type Config struct {
	// Workers is how many Scale calls may be in flight at once, each for a
	// different target.
	Workers int
	// Timeout bounds one Scale call. The actuator lets a call wait for its
	// write budget for half of it, and answers RESOURCE_EXHAUSTED then: a
	// deferral, not a failure.
	Timeout time.Duration
	// DryRun sends every call as a dry run.
	DryRun bool
	// RetryMin and RetryMax bound the per-target backoff after a failed call.
	RetryMin, RetryMax time.Duration
	// Refresh, when above 0, is how long the decision the actuator last
	// took for a target goes unsent before it is sent again, while no newer
	// one comes, until the actuator answers that the target's status
	// records it: one it applied but had not recorded when its replica
	// stopped (it coalesces status writes) reaches the replica that took
	// over.
	Refresh time.Duration
}

// Validate refuses a configuration the Sender cannot run with.
func (c *Config) Validate() error {
	if c.Workers < 1 || c.Workers > 1024 {
		return fmt.Errorf("scale workers %d: want 1 to 1024", c.Workers)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("scale timeout %s: want > 0", c.Timeout)
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("scale retry backoff %s to %s: want 0 < min ≤ max", c.RetryMin, c.RetryMax)
	}
	if c.Refresh != 0 && (c.Refresh < time.Second || c.Refresh > time.Hour) {
		return fmt.Errorf("scale refresh %s: want 0 (none) or 1s to 1h", c.Refresh)
	}
	return nil
}

// Sender keeps the newest decision of each target not yet sent and calls
// Scale from a pool of workers. A newer decision replaces an older one still
// waiting, so no stale value is ever queued. When more targets wait than
// there are workers, a wake from zero goes first, then a scale-up, then a
// scale-down, and within a class namespaces take turns (fairqueue), so a
// slow actuator makes scale-downs wait, not wakes. A target is never handed
// to two workers, so its calls are made one after another, in sequence
// order, while different targets' calls run side by side. A failed call is
// retried with per-target backoff unless a newer decision replaced it
// meanwhile. A call the actuator defers (RESOURCE_EXHAUSTED: its write
// budget could not serve it before the call's deadline) is counted and
// logged as deferred, not as failed, and retried the same way. With
// Config.Refresh, the decision each target's actuator took last is sent
// again after that long without a newer one, behind every new decision.
type Sender struct {
	cfg     Config
	client  actuatorv1.ActuatorServiceClient
	log     *zap.Logger
	backoff workqueue.TypedRateLimiter[string]
	// retry hands a failed target back after its backoff.
	retry workqueue.TypedDelayingInterface[string]

	calls      *prometheus.CounterVec
	superseded prometheus.Counter
	refreshes  prometheus.Counter
	latency    prometheus.Histogram
	// live reports whether the engine still holds a target, so that
	// delivered keeps none it dropped.
	live func(engine.Target) bool

	// mu guards the fields below. pending holds, per target key, the newest
	// decision not yet sent: at most one entry per target the engine holds.
	// busy holds the targets with a call in flight, at most Workers.
	mu      sync.Mutex
	ready   *sync.Cond // signalled when queue gains an entry or on shutdown
	pending map[string]*waiting
	busy    map[string]bool
	queue   fairqueue.Queue[string]
	shut    bool
	// delivered holds, with Config.Refresh, the decision the actuator took
	// last per target and when it was last sent: at most one entry per
	// target the engine holds, and those it dropped until the next sweep.
	delivered map[string]*delivery
}

// waiting is a target's newest decision not yet sent; entry is its place in
// the queue, nil while its target is busy or backing off. refresh marks a
// decision sent again (Config.Refresh), which goes after every new one.
type waiting struct {
	d       engine.Decision
	refresh bool
	entry   *fairqueue.Entry[string]
}

// delivery is a decision the actuator took and when it was last sent.
type delivery struct {
	d  engine.Decision
	at time.Time
}

// New returns a Sender; it sends nothing until Run. live reports whether
// the engine still holds a target (Config.Refresh sends again only those).
func New(cfg Config, client actuatorv1.ActuatorServiceClient, live func(engine.Target) bool, log *zap.Logger, reg prometheus.Registerer) *Sender {
	s := &Sender{
		cfg:       cfg,
		client:    client,
		live:      live,
		delivered: map[string]*delivery{},
		log:       log,
		backoff:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryMin, cfg.RetryMax),
		retry:     workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "scale-retry"}),
		pending:   map[string]*waiting{},
		busy:      map[string]bool{},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_decider_scale_calls_total",
			Help: "Scale calls to the actuator by result: applied, stale, refused, deferred (RESOURCE_EXHAUSTED: the actuator's write budget was short, or a rate limit; retried) or error.",
		}, []string{"result"}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidal_decider_scale_superseded_total",
			Help: "Decisions replaced by a newer one for the same target before they were sent.",
		}),
		refreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidal_decider_scale_refreshes_total",
			Help: "Decisions the actuator took sent again after --scale-refresh without a newer one (their Scale calls are counted by result too).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_decider_scale_call_seconds",
			Help:    "Duration of Scale calls to the actuator.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	s.ready = sync.NewCond(&s.mu)
	reg.MustRegister(s.calls, s.superseded, s.refreshes, s.latency, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_decider_scale_pending",
		Help: "Targets whose newest decision waits to be sent.",
	}, func() float64 { return float64(s.Pending()) }))
	return s
}

// Pending is the number of targets with a decision waiting to be sent.
func (s *Sender) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Class is the priority of sending d, from what the decider saw of its
// target: a wake when it had no pod ready and d asks for some, up when d
// asks for more than it saw, else down.
func Class(d *engine.Decision) fairqueue.Class {
	current, known := int32(0), false
	switch {
	case d.KPA != nil:
		current, known = d.KPA.ReadyPods, true
	case d.Lag != nil && d.Lag.ObservedKnown:
		current, known = d.Lag.ObservedReplicas, true
	case d.Lag != nil:
		current, known = d.Lag.ReplicasBefore, true
	}
	return fairqueue.Of(current, known, d.Bounded())
}

// Enqueue queues decisions; invalid ones (no desired scale) and advisory
// ones (a target something else scales, such as KEDA) are never sent, and
// one older than a decision already waiting for its target is dropped.
func (s *Sender) Enqueue(ds []engine.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ds {
		d := &ds[i]
		if !d.Valid() || d.Advisory {
			continue
		}
		key := d.Target.Key()
		w := s.pending[key]
		if w == nil {
			w = &waiting{}
			s.pending[key] = w
		} else {
			if w.d.Sequence > d.Sequence {
				continue
			}
			if !w.refresh {
				s.superseded.Inc()
			}
		}
		w.d, w.refresh = *d, false
		s.queueLocked(key, w)
	}
}

// queueLocked puts w in the queue in its decision's class, unless its
// target is busy (the call's end queues it). A waiting entry keeps its place
// while its class stays.
func (s *Sender) queueLocked(key string, w *waiting) {
	if s.busy[key] {
		return
	}
	c := Class(&w.d)
	if w.refresh {
		c = fairqueue.Down
	}
	if w.entry != nil {
		if w.entry.Class() == c {
			return
		}
		s.queue.Remove(w.entry)
	}
	w.entry = s.queue.Push(c, w.d.Target.Namespace, key, false)
	s.ready.Signal()
}

// Run sends until ctx ends, then waits for the calls in flight.
func (s *Sender) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	wg.Go(func() {
		for {
			key, shutdown := s.retry.Get()
			if shutdown {
				return
			}
			s.mu.Lock()
			if w := s.pending[key]; w != nil && w.entry == nil {
				s.queueLocked(key, w)
			}
			s.mu.Unlock()
			s.retry.Done(key)
		}
	})
	if s.cfg.Refresh > 0 {
		wg.Go(func() {
			// A decision is sent again between Refresh and Refresh
			// and a tenth after it was.
			t := time.NewTicker(s.cfg.Refresh / 10)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					s.refreshDue(now)
				}
			}
		})
	}
	<-ctx.Done()
	s.mu.Lock()
	s.shut = true
	s.ready.Broadcast()
	s.mu.Unlock()
	s.retry.ShutDown()
	wg.Wait()
	return nil
}

// next sends the newest decision of the target due next; false means the
// Sender is shut.
func (s *Sender) next(ctx context.Context) bool {
	s.mu.Lock()
	for s.queue.Len() == 0 && !s.shut {
		s.ready.Wait()
	}
	if s.shut {
		s.mu.Unlock()
		return false
	}
	e, _ := s.queue.Pop()
	key := e.Value
	sent := s.pending[key]
	d := sent.d
	delete(s.pending, key)
	s.busy[key] = true
	s.mu.Unlock()

	took, recorded, err := s.send(ctx, &d)

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, key)
	if s.cfg.Refresh > 0 && err == nil {
		if took && !recorded && s.live(d.Target) {
			s.delivered[key] = &delivery{d: d, at: time.Now()}
		} else {
			// Recorded in the target's status: sending it again would
			// change nothing (at 11,000 targets, nine Scale calls in ten
			// were such refreshes). Refused, or older than what the
			// actuator holds: a newer decision will come, or another
			// decider sends them now.
			delete(s.delivered, key)
		}
	}
	w := s.pending[key]
	switch {
	case w != nil:
		// A newer decision came while the call was made: it goes now.
		if err == nil {
			s.backoff.Forget(key)
		}
		s.queueLocked(key, w)
	case err != nil && ctx.Err() == nil:
		s.pending[key] = &waiting{d: d, refresh: sent.refresh}
		s.retry.AddAfter(key, s.backoff.When(key))
	default:
		s.backoff.Forget(key)
	}
	return true
}

// Forget drops what the Sender keeps of a target the engine dropped, so
// that a target made again under its name is never sent its decisions.
func (s *Sender) Forget(t engine.Target) {
	s.mu.Lock()
	delete(s.delivered, t.Key())
	s.mu.Unlock()
}

// refreshDue queues again the decisions the actuator took that went
// unsent for Config.Refresh, of targets with nothing waiting or in flight,
// and forgets those of targets the engine no longer holds.
func (s *Sender) refreshDue(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, dl := range s.delivered {
		if now.Sub(dl.at) < s.cfg.Refresh || s.busy[key] || s.pending[key] != nil {
			continue
		}
		if !s.live(dl.d.Target) {
			delete(s.delivered, key)
			continue
		}
		dl.at = now
		w := &waiting{d: dl.d, refresh: true}
		s.pending[key] = w
		s.queueLocked(key, w)
		s.refreshes.Inc()
	}
}

// send makes one Scale call; took reports that the actuator applied d or
// holds it already, recorded that its target's status held d before the
// call, and an error that a retry may help.
func (s *Sender) send(ctx context.Context, d *engine.Decision) (took, recorded bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req := &actuatorv1.ScaleRequest{
		Target:           TargetRef(d.Target),
		DesiredReplicas:  d.Bounded(),
		DecisionSequence: d.Sequence,
		Reason:           d.Reason,
		DryRun:           s.cfg.DryRun,
		ScaleClass:       scaleClasses[Class(d)],
	}
	if b := d.Bounded(); b != d.Desired {
		req.Reason = fmt.Sprintf("max-scale: %d → %d; %s", d.Desired, b, d.Reason)
	}
	if d.Strategy == engine.KPA {
		// The reconciler needs it to choose the activator mode.
		ebc := float64(d.ExcessBurstCapacity)
		req.ExcessBurstCapacity = &ebc
		// The keep-alive policy's memory rides on the write this decision
		// makes anyway; its prediction lets the last pod go without grace.
		req.KeepAliveState = d.KeepAliveState
		req.PredictedIdle = d.PredictedIdle() && req.DesiredReplicas == 0
	}
	began := time.Now()
	resp, err := s.client.Scale(cctx, req)
	s.latency.Observe(time.Since(began).Seconds())
	switch code := status.Code(err); {
	case code == codes.ResourceExhausted:
		s.calls.WithLabelValues("deferred").Inc()
		// The actuator asked to be called later (its write budget could
		// not serve the call before its deadline, or the caller is over a
		// rate): no failure, but retried after the same backoff, so that
		// a rate limit is not called in a loop.
		s.log.Debug("actuator deferred decision; will send the newest again", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return false, false, err
	case err == nil && resp.GetStale():
		s.calls.WithLabelValues("stale").Inc()
		return false, false, nil
	case err == nil:
		s.calls.WithLabelValues("applied").Inc()
		return true, resp.GetRecorded(), nil
	case code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition || code == codes.PermissionDenied:
		// Retrying the same decision cannot help; a newer one will come.
		s.calls.WithLabelValues("refused").Inc()
		s.log.Info("actuator refused decision", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return false, false, nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return false, false, err // shutting down
	default:
		s.calls.WithLabelValues("error").Inc()
		s.log.Warn("scale call failed; will retry", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return false, false, err
	}
}

// TargetRef converts an engine target to the API's.
func TargetRef(t engine.Target) *commonv1.TargetRef {
	return &commonv1.TargetRef{Namespace: t.Namespace, Name: t.Name, ApiVersion: t.APIVersion, Kind: t.Kind}
}

// scaleClasses names each class in the API, so the actuator's write budget
// orders a call as this queue did.
var scaleClasses = [fairqueue.NumClasses]actuatorv1.ScaleClass{
	fairqueue.Wake: actuatorv1.ScaleClass_SCALE_CLASS_WAKE,
	fairqueue.Up:   actuatorv1.ScaleClass_SCALE_CLASS_UP,
	fairqueue.Down: actuatorv1.ScaleClass_SCALE_CLASS_DOWN,
}
