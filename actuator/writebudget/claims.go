package writebudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrSuperseded is returned for a write whose decision a newer one for the
// same target replaced while it waited: the newer one is written instead.
var ErrSuperseded = errors.New("write budget: superseded by a newer decision for the target")

// SupersededError says which decision replaced a refused one.
type SupersededError struct {
	// Sequence is the newer decision's (0 for a worker's reconcile).
	Sequence uint64
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("%s (sequence %d)", ErrSuperseded, e.Sequence)
}

func (e *SupersededError) Unwrap() error { return ErrSuperseded }

// Claim is the right of one pass to write for a target: the requests made
// with its context (WithClaim) wait for the budget in its class and
// namespace, until a newer claim for the same target supersedes it.
type Claim struct {
	key       string
	class     Class
	namespace string
	// sequence is the decision's; 0 for a reconcile that records none.
	sequence uint64
	// superseded is closed when a newer claim takes the target's slot; by
	// is the newer's sequence, set before.
	superseded chan struct{}
	by         uint64
	// started is set once one of its requests was let through.
	started atomic.Bool
}

// Err is the claim's SupersededError once superseded, nil before.
func (c *Claim) Err() error {
	select {
	case <-c.superseded:
		return &SupersededError{Sequence: c.by}
	default:
		return nil
	}
}

// Claims holds at most one live claim per target: the newest decision's.
// Its map holds one entry per target with a pass under way, at most max.
type Claims struct {
	mu    sync.Mutex
	max   int
	slots map[string]*Claim
	// onSupersede, when set, is called for every claim superseded.
	onSupersede func(Class)
	// limiter is the Limiter whose Claims these are; nil for none.
	limiter *Limiter
}

// NewClaims returns Claims for at most limit targets at once.
func NewClaims(limit int) *Claims {
	return &Claims{max: max(1, limit), slots: map[string]*Claim{}}
}

// Len is the number of targets with a live claim.
func (cs *Claims) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.slots)
}

// Claim takes target key's slot (in namespace, for a write of class) for
// the decision of sequence; 0 is a reconcile that records no decision. The
// newest wins: a decision supersedes the claim there unless that one's
// sequence is higher, and a reconcile supersedes only another reconcile
// (a decision's pass reconciles the target anyway). A refused claim comes
// back as a *SupersededError. Call Release when the pass is done.
func (cs *Claims) Claim(key, namespace string, class Class, sequence uint64) (*Claim, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	old := cs.slots[key]
	if old != nil && (sequence < old.sequence || sequence == 0 && old.sequence > 0) {
		return nil, &SupersededError{Sequence: old.sequence}
	}
	if old == nil && len(cs.slots) >= cs.max {
		return nil, fmt.Errorf("%w: %d targets", ErrFull, len(cs.slots))
	}
	c := &Claim{key: key, class: class, namespace: namespace, sequence: sequence, superseded: make(chan struct{})}
	if old != nil {
		old.by = sequence
		close(old.superseded)
		if cs.onSupersede != nil {
			cs.onSupersede(old.class)
		}
	}
	cs.slots[key] = c
	return c, nil
}

// Release ends c's pass; its slot is freed unless a newer claim holds it.
func (cs *Claims) Release(c *Claim) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.slots[c.key] == c {
		delete(cs.slots, c.key)
	}
}

// Prepay waits under ctx for the budget, in the class of ctx's claim, and
// returns a context whose next API request is let through without waiting
// again. It is for a write made under a context of its own (one that
// outlives the caller's cancellation, scale.Finishing): its wait for the
// budget still ends with the caller. Without a Limiter it returns ctx.
func (cs *Claims) Prepay(ctx context.Context) (context.Context, error) {
	if cs.limiter == nil {
		return ctx, nil
	}
	if err := cs.limiter.Wait(ctx); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, prepaidKey{}, &prepaid{}), nil
}

// prepaid is a token taken by Prepay for the next request.
type prepaid struct{ used atomic.Bool }

type prepaidKey struct{}

// takePrepaid reports whether ctx carries a prepaid token not used yet,
// and uses it.
func takePrepaid(ctx context.Context) bool {
	p, _ := ctx.Value(prepaidKey{}).(*prepaid)
	return p != nil && p.used.CompareAndSwap(false, true)
}

type claimKey struct{}

// WithClaim returns ctx whose API requests wait for the budget under c.
func WithClaim(ctx context.Context, c *Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}
