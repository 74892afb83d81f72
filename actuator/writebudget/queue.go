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
	"container/list"
	"errors"
	"fmt"
	"math"
	"time"
)

// Class orders the requests waiting for the budget: a lower class is served
// first.
type Class uint8

const (
	// Wake is a write for a target at zero replicas asked to run some.
	Wake Class = iota
	// Up is a write for a target asked to run more, and any request that
	// names no class (informers, Events, the Deployer).
	Up
	// Down is a write for a target asked to run fewer or as many (a
	// status-only write), and the reconciles the workers run.
	Down
	numClasses
)

// String names the class in metrics and logs.
func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

var classNames = [numClasses]string{Wake: "wake", Up: "up", Down: "down"}

// ErrFull is returned when more requests wait than the bound allows.
var ErrFull = errors.New("write budget: too many requests waiting")

// Waiter is one request waiting in a Queue. Class, Namespace and
// Continuing are set by the caller before Add and not changed while it
// waits.
type Waiter struct {
	Class     Class
	Namespace string
	// Continuing puts it ahead of its namespace's other waiters of its
	// class: the next request of a pass that has made one already (a scale
	// patch after its status write), so that passes finish one by one
	// instead of each spending a token and all waiting for their second.
	Continuing bool
	// Since is when it was added.
	Since time.Time

	ns   *nsQueue
	elem *list.Element
	// granted is closed by the Limiter when it is granted.
	granted chan struct{}
}

// nsQueue is one namespace's waiters of one class, first come first served.
type nsQueue struct {
	name    string
	waiters list.List // of *Waiter
	turn    *list.Element
}

// classQueue is one class's namespaces in turn order.
type classQueue struct {
	turns  list.List // of *nsQueue
	byName map[string]*nsQueue
}

// Queue is a token bucket (rate tokens a second, up to burst) whose tokens
// are handed to waiting requests by class, and within a class to the
// namespaces in turn, one token each, first come first served within a
// namespace (but for Continuing waiters). A request that finds nobody waiting and a token takes it at
// once. It is not safe for concurrent use.
type Queue struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	classes     [numClasses]classQueue
	n, max      int
}

// NewQueue returns a Queue with a full bucket at now that holds at most
// limit waiters (at least 1).
func NewQueue(rate float64, burst, limit int, now time.Time) *Queue {
	q := &Queue{rate: rate, burst: float64(burst), tokens: float64(burst), last: now, max: max(1, limit)}
	for i := range q.classes {
		q.classes[i].byName = map[string]*nsQueue{}
	}
	return q
}

// Len is the number of waiters.
func (q *Queue) Len() int { return q.n }

// LenClass is the number of waiters of class c.
func (q *Queue) LenClass(c Class) int {
	n := 0
	for _, ns := range q.classes[c].byName {
		n += ns.waiters.Len()
	}
	return n
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
	if q.n == 0 && q.tokens >= 1 {
		q.tokens--
		return true
	}
	return false
}

// Add queues w at now, behind the waiters of its class and namespace.
func (q *Queue) Add(w *Waiter, now time.Time) error {
	if w.Class >= numClasses {
		return fmt.Errorf("write budget: %s: no such class", w.Class)
	}
	if w.elem != nil {
		return errors.New("write budget: waiter already queued")
	}
	if q.n >= q.max {
		return fmt.Errorf("%w (%d)", ErrFull, q.n)
	}
	cq := &q.classes[w.Class]
	ns := cq.byName[w.Namespace]
	if ns == nil {
		ns = &nsQueue{name: w.Namespace}
		ns.turn = cq.turns.PushBack(ns)
		cq.byName[w.Namespace] = ns
	}
	w.Since, w.ns = now, ns
	if w.Continuing {
		w.elem = ns.waiters.PushFront(w)
	} else {
		w.elem = ns.waiters.PushBack(w)
	}
	q.n++
	return nil
}

// Remove takes w out of the queue; false when it was not waiting (granted
// already, or never added).
func (q *Queue) Remove(w *Waiter) bool {
	if w.elem == nil {
		return false
	}
	q.unlink(w)
	return true
}

func (q *Queue) unlink(w *Waiter) {
	ns := w.ns
	ns.waiters.Remove(w.elem)
	w.ns, w.elem = nil, nil
	q.n--
	if ns.waiters.Len() == 0 {
		cq := &q.classes[w.Class]
		cq.turns.Remove(ns.turn)
		delete(cq.byName, ns.name)
	}
}

// Grant hands the tokens there are at now to the waiters they are due to,
// appending them to granted in order. next is how long until the next token
// when waiters remain, 0 when none does.
func (q *Queue) Grant(now time.Time, granted []*Waiter) (_ []*Waiter, next time.Duration) {
	q.refill(now)
	for c := range q.classes {
		cq := &q.classes[c]
		for q.tokens >= 1 && cq.turns.Len() > 0 {
			ns := cq.turns.Front().Value.(*nsQueue)
			w := ns.waiters.Front().Value.(*Waiter)
			// The namespace goes to the back of the turns before it may be
			// removed as empty.
			cq.turns.MoveToBack(ns.turn)
			q.unlink(w)
			q.tokens--
			granted = append(granted, w)
		}
	}
	if q.n == 0 {
		return granted, 0
	}
	wait := math.Ceil((1 - q.tokens) / q.rate * float64(time.Second))
	return granted, max(time.Duration(wait), time.Nanosecond)
}
