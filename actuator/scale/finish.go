package scale

import (
	"context"
	"time"
)

// FinishTimeout bounds a write that records a change already made (the
// status write after a scale). Such a write outlives its caller's
// cancellation, so a shutdown does not leave the record behind the change;
// but only this long, so an API server that does not answer cannot hold the
// process past its termination grace period.
const FinishTimeout = 5 * time.Second

// Finishing returns the context for such a write: not cancelled with ctx,
// done after FinishTimeout.
func Finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), FinishTimeout)
}
