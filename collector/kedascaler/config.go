package kedascaler

import (
	"flag"
	"fmt"
	"time"
)

// Config bounds the external scaler's calls and streams.
type Config struct {
	// CallTimeout bounds each call to a decider: KEDA sets no deadline of
	// its own, and a call that hangs would hold KEDA's scaling loop.
	CallTimeout time.Duration
	// MaxStreams bounds the StreamIsActive and StreamMetricSpec streams
	// open on this collector; MaxStreamsPerCaller those of one caller
	// identity. KEDA opens one of each per external-push trigger.
	MaxStreams          int
	MaxStreamsPerCaller int
	// MaxWatches bounds this collector's WatchDecisions streams to deciders
	// (one per decider and namespace, shared by every KEDA stream there).
	// The deciders bound them too, per caller identity
	// (--watch-max-streams-per-caller), which every collector replica
	// shares.
	MaxWatches int
	// OwnerCheck is how often open streams look for a target's owning
	// decider having changed.
	OwnerCheck time.Duration
	// MinBackoff and MaxBackoff bound the wait before a broken watch of a
	// decider is reopened.
	MinBackoff, MaxBackoff time.Duration
}

// RegisterFlagsWithPrefix registers the flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.DurationVar(&c.CallTimeout, p+"call-timeout", 5*time.Second, "Longest wait for a decider's answer to a KEDA call; beyond it KEDA gets UNAVAILABLE.")
	fs.IntVar(&c.MaxStreams, p+"max-streams", 1024, "KEDA streams (StreamIsActive, StreamMetricSpec) open at once on this collector; one more is refused with RESOURCE_EXHAUSTED.")
	fs.IntVar(&c.MaxStreamsPerCaller, p+"max-streams-per-caller", 1024, "KEDA streams open at once for one caller identity; one more is refused.")
	fs.IntVar(&c.MaxWatches, p+"max-watches", 8, "WatchDecisions streams this collector keeps to deciders for KEDA streams (one per decider and namespace); keep it below the deciders' --watch-max-streams-per-caller divided by the collector replicas.")
	fs.DurationVar(&c.OwnerCheck, p+"owner-check-interval", time.Second, "How often KEDA streams look for their target having moved to another decider.")
	fs.DurationVar(&c.MinBackoff, p+"watch-min-backoff", 100*time.Millisecond, "First wait before reopening a broken watch of a decider.")
	fs.DurationVar(&c.MaxBackoff, p+"watch-max-backoff", 5*time.Second, "Longest wait before reopening a broken watch of a decider.")
}

// Validate refuses values that would disable a bound, naming the flag.
func (c *Config) Validate(p string) error {
	switch {
	case c.CallTimeout <= 0:
		return fmt.Errorf("--%scall-timeout %s: want more than 0", p, c.CallTimeout)
	case c.MaxStreams < 1:
		return fmt.Errorf("--%smax-streams %d: want at least 1", p, c.MaxStreams)
	case c.MaxStreamsPerCaller < 1 || c.MaxStreamsPerCaller > c.MaxStreams:
		return fmt.Errorf("--%smax-streams-per-caller %d: want 1 to --%smax-streams (%d)", p, c.MaxStreamsPerCaller, p, c.MaxStreams)
	case c.MaxWatches < 1:
		return fmt.Errorf("--%smax-watches %d: want at least 1", p, c.MaxWatches)
	case c.OwnerCheck <= 0:
		return fmt.Errorf("--%sowner-check-interval %s: want more than 0", p, c.OwnerCheck)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("--%swatch-min-backoff %s, --%swatch-max-backoff %s: want 0 < min <= max", p, c.MinBackoff, p, c.MaxBackoff)
	}
	return nil
}
