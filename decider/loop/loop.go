// Package loop drives a decider's engine: one ticker for every target, as
// opposed to Knative's goroutine and ticker per revision, and each tick's
// decisions handed on.
package loop

import (
	"context"
	"time"

	"github.com/tidalscale/tidal/decider/engine"
)

// Run ticks e every resolution with the time now gives, fine enough for the
// lag strategies' 100 ms intervals (the engine decides KPA targets on their
// own grid), and passes each tick's decisions to decided, until ctx ends.
// A KPA tick whose samples are all in (Engine.Ready) is made at once, not
// up to a resolution later.
func Run(ctx context.Context, e *engine.Engine, resolution time.Duration, now func() time.Time, decided func([]engine.Decision)) error {
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			decided(e.Tick(now()))
		case <-e.Ready():
			decided(e.TickKPA(now()))
		}
	}
}
