// Package fairqueue orders waiting work by priority class and, within a
// class, lets namespaces take turns: the actuator's write budget and the
// decider's Scale sender both hand out a scarce resource (API requests, calls
// in flight) this way, so a wake from zero goes before a scale-down and one
// busy namespace cannot starve the others.
package fairqueue

import (
	"container/list"
	"fmt"
)

// Class orders the entries: a lower class is served first.
type Class uint8

const (
	// Wake is work for a target at zero replicas asked to run some.
	Wake Class = iota
	// Up is work for a target asked to run more.
	Up
	// Down is work for a target asked to run fewer or as many.
	Down
	// NumClasses is the number of classes.
	NumClasses
)

// String names the class in metrics and logs.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

var classNames = [NumClasses]string{Wake: "wake", Up: "up", Down: "down"}

// Of is the class of asking a target that has current replicas (known says
// whether current is) for desired.
func Of(current int32, known bool, desired int32) Class {
	switch {
	case desired > 0 && known && current == 0:
		return Wake
	case desired > current || !known && desired > 0:
		return Up
	}
	return Down
}

// Entry is one value waiting in a Queue.
type Entry[T any] struct {
	Value     T
	class     Class
	namespace string
	ns        *nsQueue[T]
	elem      *list.Element
}

// Class is the class it waits in.
func (e *Entry[T]) Class() Class { return e.class }

// Namespace is the namespace it waits in.
func (e *Entry[T]) Namespace() string { return e.namespace }

// Queued reports whether it waits in a queue.
func (e *Entry[T]) Queued() bool { return e.elem != nil }

// nsQueue is one namespace's entries of one class, first come first served.
type nsQueue[T any] struct {
	name    string
	entries list.List // of *Entry[T]
	turn    *list.Element
}

// classQueue is one class's namespaces in turn order.
type classQueue[T any] struct {
	turns  list.List // of *nsQueue[T]
	byName map[string]*nsQueue[T]
}

// Queue holds entries by class, and within a class by namespace in turn,
// first come first served within a namespace. Its maps hold one entry per
// namespace with an entry waiting. It is not safe for concurrent use; the
// zero value is empty and ready.
type Queue[T any] struct {
	classes [NumClasses]classQueue[T]
	n       int
}

// Len is the number of entries waiting.
func (q *Queue[T]) Len() int { return q.n }

// LenClass is the number of entries of class c waiting.
func (q *Queue[T]) LenClass(c Class) int {
	if c >= NumClasses {
		return 0
	}
	n := 0
	for _, ns := range q.classes[c].byName {
		n += ns.entries.Len()
	}
	return n
}

// Namespaces is the number of namespaces with entries of class c waiting:
// an emptied namespace leaves, so nothing grows with names.
func (q *Queue[T]) Namespaces(c Class) int {
	if c >= NumClasses {
		return 0
	}
	return len(q.classes[c].byName)
}

// Push queues v in class c and namespace, behind that namespace's entries
// of the class, or ahead of them when front is set. A class past the last
// is served last (as Down).
func (q *Queue[T]) Push(c Class, namespace string, v T, front bool) *Entry[T] {
	c = min(c, Down)
	cq := &q.classes[c]
	if cq.byName == nil {
		cq.byName = map[string]*nsQueue[T]{}
	}
	ns := cq.byName[namespace]
	if ns == nil {
		ns = &nsQueue[T]{name: namespace}
		ns.turn = cq.turns.PushBack(ns)
		cq.byName[namespace] = ns
	}
	e := &Entry[T]{Value: v, class: c, namespace: namespace, ns: ns}
	if front {
		e.elem = ns.entries.PushFront(e)
	} else {
		e.elem = ns.entries.PushBack(e)
	}
	q.n++
	return e
}

// Remove takes e out of the queue; false when it was not waiting (popped
// already, or removed).
func (q *Queue[T]) Remove(e *Entry[T]) bool {
	if e == nil || e.elem == nil {
		return false
	}
	ns := e.ns
	ns.entries.Remove(e.elem)
	e.ns, e.elem = nil, nil
	q.n--
	if ns.entries.Len() == 0 {
		cq := &q.classes[e.class]
		cq.turns.Remove(ns.turn)
		delete(cq.byName, ns.name)
	}
	return true
}

// Pop takes the entry due next: the first of the namespace whose turn it is
// in the lowest class with entries; that namespace goes to the back of its
// class's turns. False when none waits.
func (q *Queue[T]) Pop() (*Entry[T], bool) {
	for c := range q.classes {
		cq := &q.classes[c]
		if cq.turns.Len() == 0 {
			continue
		}
		ns := cq.turns.Front().Value.(*nsQueue[T])
		e := ns.entries.Front().Value.(*Entry[T])
		// The namespace goes to the back before it may be removed as empty.
		cq.turns.MoveToBack(ns.turn)
		q.Remove(e)
		return e, true
	}
	return nil, false
}
