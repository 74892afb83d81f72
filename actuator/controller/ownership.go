package controller

import (
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// OwnerFunc names the replica that reconciles key ("namespace/name") and
// reports whether it is this one.
type OwnerFunc func(key string) (addr string, mine bool)

// Ownership is which objects this replica reconciles when actuator
// replicas share them. The zero value owns everything.
type Ownership struct {
	owner atomic.Pointer[OwnerFunc]
}

// Set installs f; nil owns everything again.
func (o *Ownership) Set(f OwnerFunc) {
	if f == nil {
		o.owner.Store(nil)
		return
	}
	o.owner.Store(&f)
}

// Shared reports whether replicas share the objects (an OwnerFunc is
// installed): each object then has one owner at a time, as the Leases
// behind the OwnerFunc arbitrate.
func (o *Ownership) Shared() bool { return o.owner.Load() != nil }

// Owns reports whether this replica reconciles name, and who does if not.
func (o *Ownership) Owns(name cache.ObjectName) (addr string, mine bool) {
	f := o.owner.Load()
	if f == nil {
		return "", true
	}
	return (*f)(name.Namespace + "/" + name.Name)
}

// Owned calls add with the name of every object in store this replica
// owns: after a change of ownership, the objects it gained are reconciled
// from their current state.
func (o *Ownership) Owned(store cache.Store, add func(cache.ObjectName)) {
	for _, key := range store.ListKeys() {
		name, err := cache.ParseObjectName(key)
		if err != nil {
			continue
		}
		if _, mine := o.Owns(name); mine {
			add(name)
		}
	}
}
