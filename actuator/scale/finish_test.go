package scale

import (
	"context"
	"testing"
	"time"
)

func TestFinishingOutlivesCancelWithinBound(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	ctx, done := Finishing(parent)
	defer done()
	cancel()
	if ctx.Err() != nil {
		t.Fatalf("cancelled with its caller: %v", ctx.Err())
	}
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > FinishTimeout || time.Until(dl) < FinishTimeout-time.Second {
		t.Fatalf("deadline %v (set %v); want about %v from now", time.Until(dl), ok, FinishTimeout)
	}
}
