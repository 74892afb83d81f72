package scale

import (
	"context"
	"time"
)

// FinishTimeout bounds a write that records a change already made (the
// status write after a scale). Such a write outlives its caller's
// cancellation, so a shutdown does not leave the record behind the change;
// but only this long (or until its caller's deadline, when later), so an
// API server that does not answer cannot hold the process past its
// termination grace period.
const FinishTimeout = 5 * time.Second

// Finishing returns the context for such a write: not cancelled with ctx,
// done at ctx's deadline or after FinishTimeout, whichever is later. A
// caller that allows a call longer (a Scale call with a long timeout, while
// a loaded API server takes seconds to answer) lets the record take as long
// as the change it records did; without a deadline, or with a shorter one,
// FinishTimeout bounds it.
func Finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(FinishTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.After(end) {
		end = dl
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}
