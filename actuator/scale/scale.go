package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Target names a scalable object.
type Target struct {
	Namespace, Name string
	// APIVersion and Kind select the resource; empty means apps/v1 Deployment.
	APIVersion, Kind string
}

func (t Target) String() string { return t.Namespace + "/" + t.Name }

// Decision is one desired scale to apply.
type Decision struct {
	Target   Target
	Desired  int32
	Sequence uint64
	Reason   string
	// DryRun reports what would happen and changes nothing.
	DryRun bool
}

// Result is what Apply did.
type Result struct {
	// Applied is the replica count after the call (what it would be, for a dry run).
	Applied int32
	// Previous is the replica count before the call.
	Previous int32
	// Changed is true when the target's replicas were written.
	Changed bool
	// Stale is true when the decision was older than the last applied one and refused.
	Stale bool
	// LastSequence is the newest applied sequence for the target after the call.
	LastSequence uint64
	// Recorded is true when the target's PodAutoscaler status held this
	// decision or a newer one before the call.
	Recorded bool
}

// Status is what is known about a target's scale.
type Status struct {
	Replicas     int32
	LastSequence uint64
	LastReason   string
	LastApplied  time.Time
}

// ErrNotFound is returned when the target does not exist.
var ErrNotFound = errors.New("target not found")

// Scaler reads and writes a target's replica count.
type Scaler interface {
	GetReplicas(ctx context.Context, t Target) (int32, error)
	SetReplicas(ctx context.Context, t Target, replicas int32) error
}

// Applier applies decisions through a Scaler.
type Applier struct {
	scaler Scaler
	now    func() time.Time

	// mu guards last and serialises Apply per Applier, so two decisions for
	// one target can never interleave their read and write.
	mu   sync.Mutex
	last map[Target]applied
}

type applied struct {
	seq    uint64
	reason string
	at     time.Time
}

// New returns an Applier writing through scaler; now is the clock used to
// stamp applied decisions.
func New(scaler Scaler, now func() time.Time) *Applier {
	return &Applier{scaler: scaler, now: now, last: map[Target]applied{}}
}

// Apply applies d. A decision with a sequence below the last applied one is
// refused as stale and changes nothing; the same sequence again is a no-op
// write of the same value (idempotent retry).
func (a *Applier) Apply(ctx context.Context, d Decision) (Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev, err := a.scaler.GetReplicas(ctx, d.Target)
	if err != nil {
		return Result{}, fmt.Errorf("get scale of %s: %w", d.Target, err)
	}
	last := a.last[d.Target]
	if d.Sequence < last.seq {
		return Result{Applied: prev, Previous: prev, Stale: true, LastSequence: last.seq}, nil
	}
	res := Result{Applied: d.Desired, Previous: prev, LastSequence: last.seq}
	if d.DryRun {
		return res, nil
	}
	if prev != d.Desired {
		if err := a.scaler.SetReplicas(ctx, d.Target, d.Desired); err != nil {
			return Result{}, fmt.Errorf("set scale of %s to %d: %w", d.Target, d.Desired, err)
		}
		res.Changed = true
	}
	a.last[d.Target] = applied{seq: d.Sequence, reason: d.Reason, at: a.now()}
	res.LastSequence = d.Sequence
	return res, nil
}

// Get returns the target's scale and its last applied decision.
func (a *Applier) Get(ctx context.Context, t Target) (Status, error) {
	replicas, err := a.scaler.GetReplicas(ctx, t)
	if err != nil {
		return Status{}, fmt.Errorf("get scale of %s: %w", t, err)
	}
	a.mu.Lock()
	last := a.last[t]
	a.mu.Unlock()
	return Status{Replicas: replicas, LastSequence: last.seq, LastReason: last.reason, LastApplied: last.at}, nil
}
