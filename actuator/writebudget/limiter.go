package writebudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/tidalscale/tidal/fairqueue"
)

// ErrStopped is returned by Wait once the Limiter is stopped.
var ErrStopped = errors.New("write budget: stopped")

// ErrDeferred is returned by Wait for a request that waited for the budget
// as long as its context's wait limit allows (WithWaitLimit): nothing of
// its pass was sent, and its caller should come back later.
var ErrDeferred = errors.New("write budget: deferred")

// DeferredError says how long a deferred request waited, and where.
type DeferredError struct {
	Class  Class
	Waited time.Duration
	// QPS is the budget's rate, and Waiting the requests that were
	// waiting when it gave up, itself included.
	QPS     float32
	Waiting int
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("%s: waited %s in class %s for the API budget (%g requests a second, %d waiting) and its caller's deadline is near; nothing was written: retry with the newest decision",
		ErrDeferred, e.Waited.Round(time.Millisecond), e.Class, e.QPS, e.Waiting)
}

func (e *DeferredError) Unwrap() error { return ErrDeferred }

type waitLimitKey struct{}

// WithWaitLimit returns ctx whose requests that would start a pass (the
// first of its claim, or any without a claim) wait for the budget only
// until until, then fail with a *DeferredError. A pass that has sent a
// request already is not cut short: finishing what it began (the scale
// patch after its status write) is worth more than its turn; it still ends
// with ctx.
func WithWaitLimit(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, waitLimitKey{}, until)
}

// Limiter is client-go's rate limiter over a Queue: set as a rest.Config's
// RateLimiter, every request of every client built from it waits here, in
// the class and namespace of the Claim its context carries (WithClaim), or
// as Up in no namespace without one. A claim superseded while its request
// waits ends the wait with a *SupersededError (a request already sent is
// not stopped), and a wait past its context's limit (WithWaitLimit) with a
// *DeferredError.
type Limiter struct {
	clock clock.Clock
	qps   float32

	mu      sync.Mutex
	q       *Queue
	stopped bool
	// kick wakes the dispatcher when requests start to wait; stop ends it
	// and done says it has returned.
	kick       chan struct{}
	stop, done chan struct{}
	stopOnce   sync.Once

	waited     *prometheus.HistogramVec
	superseded *prometheus.CounterVec
	deferred   *prometheus.CounterVec
	expired    *prometheus.CounterVec
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// The values of tidal_actuator_write_budget_expired_total's request label:
// a request that would start a pass, or one of a pass that has written.
const (
	requestFirst = "first"
	requestLater = "later"
)

// NewLimiter returns a Limiter of qps requests a second with bursts of
// burst, for at most limit requests waiting at once; it registers its
// metrics on reg (nil for none). Its dispatcher runs until Stop.
func NewLimiter(qps float64, burst, limit int, clk clock.Clock, reg prometheus.Registerer) *Limiter {
	l := &Limiter{
		clock: clk,
		qps:   float32(qps),
		q:     NewQueue(qps, burst, limit, clk.Now()),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidal_actuator_write_budget_wait_seconds",
			Help:    "How long API requests waited for the client-side budget (--kube-qps), by class: wake, up, down.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"class"}),
		superseded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actuator_write_budget_superseded_total",
			Help: "Writes for a target replaced by a newer decision for it before they were made, by class of the replaced one.",
		}, []string{"class"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actuator_write_budget_deferred_total",
			Help: "Passes that waited for the budget as long as their caller's deadline allowed and gave up before writing anything (answered RESOURCE_EXHAUSTED, to be retried), by class.",
		}, []string{"class"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actuator_write_budget_expired_total",
			Help: "API requests whose context ended while they waited for the budget (their caller's deadline passed or it went away), by class and request: first for a request that would start a pass (a call with a deadline is deferred before that), later for one of a pass that has written already, which waits without the deferral's limit (its call's deadline went mostly to the API server's answers).",
		}, []string{"class", "request"}),
	}
	for c := range fairqueue.NumClasses {
		l.deferred.WithLabelValues(c.String()) // at 0 before the first
		l.expired.WithLabelValues(c.String(), requestFirst)
		l.expired.WithLabelValues(c.String(), requestLater)
	}
	if reg != nil {
		waiting := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_actuator_write_budget_waiting",
			Help: "API requests waiting for the client-side budget, by class.",
		}, []string{"class"})
		reg.MustRegister(l.waited, l.superseded, l.deferred, l.expired, prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
			for c := range fairqueue.NumClasses {
				waiting.WithLabelValues(c.String()).Set(float64(l.Waiting(c)))
			}
			waiting.Collect(ch)
		}))
	}
	go l.dispatch()
	return l
}

// Claims returns Claims for at most limit targets whose superseded claims
// this Limiter counts.
func (l *Limiter) Claims(limit int) *Claims {
	cs := NewClaims(limit)
	cs.limiter = l
	cs.onSupersede = func(c Class) { l.superseded.WithLabelValues(c.String()).Inc() }
	return cs
}

// Waiting is the number of requests of class c waiting.
func (l *Limiter) Waiting(c Class) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.q.LenClass(c)
}

// Wait returns nil once the request may be sent: at once when a token is
// there and nobody waits, else when the queue grants it one; a request
// that would start a pass fails with a *DeferredError at its context's
// wait limit, or at once when that has passed and no token is free.
func (l *Limiter) Wait(ctx context.Context) (err error) {
	if takePrepaid(ctx) {
		return nil
	}
	claim, _ := ctx.Value(claimKey{}).(*Claim)
	w := &Waiter{Class: Up, granted: make(chan struct{})}
	var superseded <-chan struct{}
	if claim != nil {
		if err := claim.Err(); err != nil {
			return err
		}
		w.Class, w.Namespace, superseded = claim.class, claim.namespace, claim.superseded
		w.Continuing = claim.started.Load()
		defer func() {
			if err == nil {
				claim.started.Store(true)
			}
		}()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	until, limited := ctx.Value(waitLimitKey{}).(time.Time)
	limited = limited && !w.Continuing
	now := l.clock.Now()
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return ErrStopped
	}
	if l.q.TryTake(now) {
		l.mu.Unlock()
		l.waited.WithLabelValues(w.Class.String()).Observe(0)
		return nil
	}
	if limited && !until.After(now) {
		n := l.q.Len() + 1
		l.mu.Unlock()
		l.deferred.WithLabelValues(w.Class.String()).Inc()
		return &DeferredError{Class: w.Class, QPS: l.qps, Waiting: n}
	}
	if err := l.q.Add(w, now); err != nil {
		l.mu.Unlock()
		return err
	}
	l.grantLocked(now)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}

	var limit <-chan time.Time
	if limited {
		timer := l.clock.NewTimer(until.Sub(now))
		defer timer.Stop()
		limit = timer.C()
	}
	select {
	case <-w.granted:
	case <-ctx.Done():
		err = ctx.Err()
	case <-superseded:
		err = claim.Err()
	case <-limit:
		err = &DeferredError{Class: w.Class, QPS: l.qps}
	}
	if err != nil {
		l.mu.Lock()
		waiting := l.q.Len()
		removed := l.q.Remove(w)
		l.mu.Unlock()
		if removed {
			var de *DeferredError
			switch {
			case errors.As(err, &de):
				de.Waited, de.Waiting = l.clock.Since(w.Since), waiting
				l.deferred.WithLabelValues(w.Class.String()).Inc()
			case ctx.Err() != nil:
				request := requestFirst
				if w.Continuing {
					request = requestLater
				}
				l.expired.WithLabelValues(w.Class.String(), request).Inc()
			}
			return err
		}
		// Granted meanwhile: the token is this request's.
	}
	l.waited.WithLabelValues(w.Class.String()).Observe(l.clock.Since(w.Since).Seconds())
	return nil
}

// grantLocked wakes the waiters the tokens at now are due to; next is how
// long until the next token when some still wait, 0 when none does.
func (l *Limiter) grantLocked(now time.Time) (next time.Duration) {
	var buf [8]*Waiter
	granted, next := l.q.Grant(now, buf[:0])
	for _, g := range granted {
		close(g.granted)
	}
	return next
}

// dispatch grants each token as it is earned while requests wait, until
// Stop.
func (l *Limiter) dispatch() {
	defer close(l.done)
	for {
		l.mu.Lock()
		next := l.grantLocked(l.clock.Now())
		l.mu.Unlock()
		var due <-chan time.Time
		stopTimer := func() bool { return false }
		if next > 0 {
			timer := l.clock.NewTimer(next)
			due, stopTimer = timer.C(), timer.Stop
		}
		select {
		case <-l.stop:
			stopTimer()
			return
		case <-l.kick:
		case <-due:
		}
		stopTimer()
	}
}

// TryAccept takes a token if one is there and nobody waits for it.
func (l *Limiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.stopped && l.q.TryTake(l.clock.Now())
}

// Accept waits for a token, as a request of no claim.
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// QPS is the rate tokens are earned at.
func (l *Limiter) QPS() float32 { return l.qps }

// Stop stops the dispatcher and waits for it; requests still waiting wait
// for their contexts, and later ones are refused.
func (l *Limiter) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}
