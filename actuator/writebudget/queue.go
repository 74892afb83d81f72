// Package writebudget spends the actuator's client-side API budget (its
// --kube-qps and --kube-burst) by priority: when the budget is short, a
// target woken from zero goes first, then a scale-up, then a scale-down or a
// status-only write, and within a class namespaces take turns. A newer
// decision for a target takes the place of an older one still waiting
// (Claims), so no stale value waits for the budget.
//
// Queue is the pure part (a token bucket and the waiting requests, with time
// passed in); Limiter is it as client-go's rate limiter, shared by every
// client the actuator builds.
package writebudget

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/fairqueue"
)

// Class orders the requests waiting for the budget: a lower class is served
// first. Wake is a write for a target at zero replicas asked to run some; Up
// a write for a target asked to run more, and any request that names no
// class (informers, Events, the Deployer); Down a write for a target asked to
// run fewer or as many (a status-only write), and the reconciles the workers
// run.
type Class = fairqueue.Class

// The classes, as fairqueue's.
const (
	Wake = fairqueue.Wake
	Up   = fairqueue.Up
	Down = fairqueue.Down
)

// ErrFull is returned when more requests wait than the bound allows.
var ErrFull = errors.New("write budget: too many requests waiting")

// Waiter is one request waiting in a Queue. Class, Namespace and
// Continuing are set by the caller before Add and not changed while it
// waits.
type Waiter struct {
	Class     Class
	Namespace string
	// Continuing puts it ahead of every new waiter of its class, in every
	// namespace, behind the Continuing ones before it: the next request of
	// a pass that has made one already (a scale patch after its status
	// write). Passes then finish one by one, each within about a token of
	// its start, instead of each spending a token and all waiting for their
	// second past their callers' deadlines. Namespaces still take turns
	// starting passes, and a pass has at most one request waiting.
	Continuing bool
	// Since is when it was added.
	Since time.Time

	entry *fairqueue.Entry[*Waiter]
	// granted is closed by the Limiter when it is granted.
	granted chan struct{}
}

// Queue is a token bucket (rate tokens a second, up to burst) whose tokens
// are handed to waiting requests by class, and within a class to the
// Continuing ones first, in order, then to the namespaces in turn, one token
// each, first come first served within a namespace. A request that finds
// nobody waiting and a token takes it at once. It is not safe for
// concurrent use.
type Queue struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	// waiting holds the new waiters, continuing the Continuing ones (in one
	// namespace: first come first served within their class).
	waiting, continuing fairqueue.Queue[*Waiter]
	max                 int
}

// NewQueue returns a Queue with a full bucket at now that holds at most
// limit waiters (at least 1).
func NewQueue(rate float64, burst, limit int, now time.Time) *Queue {
	return &Queue{rate: rate, burst: float64(burst), tokens: float64(burst), last: now, max: max(1, limit)}
}

// Len is the number of waiters.
func (q *Queue) Len() int { return q.waiting.Len() + q.continuing.Len() }

// LenClass is the number of waiters of class c.
func (q *Queue) LenClass(c Class) int { return q.waiting.LenClass(c) + q.continuing.LenClass(c) }

// queueOf is the queue w waits, or would wait, in.
func (q *Queue) queueOf(w *Waiter) *fairqueue.Queue[*Waiter] {
	if w.Continuing {
		return &q.continuing
	}
	return &q.waiting
}

// refill adds the tokens earned since the last call.
func (q *Queue) refill(now time.Time) {
	if now.After(q.last) {
		q.tokens = min(q.burst, q.tokens+q.rate*now.Sub(q.last).Seconds())
		q.last = now
	}
}

// TryTake takes a token at now if one is there and nobody waits for it.
func (q *Queue) TryTake(now time.Time) bool {
	q.refill(now)
	if q.Len() == 0 && q.tokens >= 1 {
		q.tokens--
		return true
	}
	return false
}

// Add queues w at now, behind the waiters of its class and namespace.
func (q *Queue) Add(w *Waiter, now time.Time) error {
	if w.Class >= fairqueue.NumClasses {
		return fmt.Errorf("write budget: %s: no such class", w.Class)
	}
	if w.entry != nil {
		return errors.New("write budget: waiter already queued")
	}
	if n := q.Len(); n >= q.max {
		return fmt.Errorf("%w (%d)", ErrFull, n)
	}
	w.Since = now
	if w.Continuing {
		w.entry = q.continuing.Push(w.Class, "", w, false)
	} else {
		w.entry = q.waiting.Push(w.Class, w.Namespace, w, false)
	}
	return nil
}

// Remove takes w out of the queue; false when it was not waiting (granted
// already, or never added).
func (q *Queue) Remove(w *Waiter) bool {
	if !q.queueOf(w).Remove(w.entry) {
		return false
	}
	w.entry = nil
	return true
}

// Grant hands the tokens there are at now to the waiters they are due to,
// appending them to granted in order. next is how long until the next token
// when waiters remain, 0 when none does.
func (q *Queue) Grant(now time.Time, granted []*Waiter) (_ []*Waiter, next time.Duration) {
	q.refill(now)
	for q.tokens >= 1 {
		w, ok := q.pop()
		if !ok {
			break
		}
		w.entry = nil
		q.tokens--
		granted = append(granted, w)
	}
	if q.Len() == 0 {
		return granted, 0
	}
	wait := math.Ceil((1 - q.tokens) / q.rate * float64(time.Second))
	return granted, max(time.Duration(wait), time.Nanosecond)
}

// pop takes the waiter due next: of the lowest class with waiters, a
// Continuing one first.
func (q *Queue) pop() (*Waiter, bool) {
	for c := range fairqueue.NumClasses {
		for _, fq := range []*fairqueue.Queue[*Waiter]{&q.continuing, &q.waiting} {
			if fq.LenClass(c) > 0 {
				e, _ := fq.Pop()
				return e.Value, true
			}
		}
	}
	return nil, false
}
