// Package overlay remembers the objects a controller wrote until its
// informer's cache shows them, so reads right after a write see the write
// (no conflict on the next write, no second patch of the same value) and the
// controller can tell its own writes' watch events from others'.
package overlay

import (
	"strconv"
	"sync"
)

// Overlay holds, per key, the value and resourceVersion of this process's
// last write that the cache has not caught up with. It holds at most one
// entry per key, and a key leaves once the cache reaches its write or the
// object is deleted.
type Overlay[K comparable, V any] struct {
	// mu guards m.
	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	rv    uint64
	value V
}

// New returns an empty Overlay.
func New[K comparable, V any]() *Overlay[K, V] {
	return &Overlay[K, V]{m: map[K]entry[V]{}}
}

// Put records a write of value at resourceVersion rv. A resourceVersion
// that is not a number (the API server's are) is not recorded: the cache is
// then the only source, which is always safe, only slower.
func (o *Overlay[K, V]) Put(k K, rv string, value V) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		o.Delete(k)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if old, ok := o.m[k]; ok && old.rv > n {
		return
	}
	o.m[k] = entry[V]{rv: n, value: value}
}

// Newer returns the written value when it is newer than the cache's copy at
// cachedRV; once the cache has caught up it forgets the write.
func (o *Overlay[K, V]) Newer(k K, cachedRV string) (V, bool) {
	var zero V
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[k]
	if !ok {
		return zero, false
	}
	n, err := strconv.ParseUint(cachedRV, 10, 64)
	if err == nil && n < e.rv {
		return e.value, true
	}
	delete(o.m, k)
	return zero, false
}

// Own reports whether rv is the resourceVersion of this process's last
// write of k: a watch event for it is an echo of that write.
func (o *Overlay[K, V]) Own(k K, rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[k]
	return ok && e.rv == n
}

// Delete forgets k.
func (o *Overlay[K, V]) Delete(k K) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, k)
}

// Len is the number of writes the cache has not caught up with.
func (o *Overlay[K, V]) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}
