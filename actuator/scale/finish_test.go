package scale

import (
	"context"
	"testing"
	"time"
)

// TestFinishing: a write that records a change outlives its caller's
// cancellation, until the caller's deadline or FinishTimeout, the later.
func TestFinishing(t *testing.T) {
	for _, c := range []struct {
		name   string
		caller time.Duration // 0: no deadline
		want   time.Duration
	}{
		{"no deadline", 0, FinishTimeout},
		{"shorter deadline", time.Second, FinishTimeout},
		{"longer deadline", 5 * time.Minute, 5 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.caller > 0 {
				parent, cancel = context.WithTimeout(parent, c.caller)
				defer cancel()
			}
			ctx, done := Finishing(parent)
			defer done()
			cancel()
			if ctx.Err() != nil {
				t.Fatalf("cancelled with its caller: %v", ctx.Err())
			}
			dl, ok := ctx.Deadline()
			if left := time.Until(dl); !ok || left > c.want || left < c.want-time.Second {
				t.Fatalf("deadline in %v (set %v); want about %v", left, ok, c.want)
			}
		})
	}
}
