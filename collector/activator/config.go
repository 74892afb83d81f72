package activator

import (
	"flag"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Config tunes the activator endpoint.
type Config struct {
	// Listen is the address the websocket endpoint serves on; empty turns
	// it off. Knative's activators dial port 8080 of the autoscaler
	// Service (cmd/activator/main.go, v0.50.0).
	Listen string
	// MaxFrameBytes bounds one websocket message; a larger one closes the
	// connection (1009, message too big) before its payload is read.
	MaxFrameBytes int
	// MaxMessages bounds the WireStatMessages in one frame: one per
	// revision the activator saw traffic for in its last second.
	MaxMessages int
	// StatRate and StatBurst bound the stats per second one connection may
	// send (a frame counts at least one); beyond them a frame is dropped
	// and counted, and the connection stays.
	StatRate  float64
	StatBurst int
	// MaxConnections bounds the connections held at once; one more is
	// refused with 503 before the upgrade.
	MaxConnections int
	// AllowedNets are the networks callers may connect from; empty means
	// any. Knative's activators connect in plain ws without credentials, so
	// this (with a NetworkPolicy) is the bound on who may push.
	AllowedNets []netip.Prefix
	// IdleTimeout closes a connection that sent nothing (no frame, no
	// ping) for this long. Knative's activators ping every 3.3 s.
	IdleTimeout time.Duration
	// BacklogWait is how long a frame waits while a decider's backlog is
	// full before its stats are dropped; the wait holds up the
	// connection's pongs, and Knative's activator counts itself not Ready
	// when none came for 10 s (knative.dev/pkg/websocket pongTimeout).
	// After a wait in vain the connection's frames are dropped at once
	// until one finds room, so a lasting backlog costs each connection one
	// wait.
	BacklogWait time.Duration
	// ForwardTimeout bounds one forward to the owning replica.
	ForwardTimeout time.Duration
	// ForwardQueue bounds the batches waiting for one owning replica; one
	// more is dropped and counted.
	ForwardQueue int
}

// RegisterFlagsWithPrefix registers the flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, p+"listen", "", "Address to serve Knative's activator websocket protocol on, e.g. :8080 (Knative's activators dial port 8080 of the autoscaler Service); empty means off.")
	fs.IntVar(&c.MaxFrameBytes, p+"max-frame-bytes", 4<<20, "Largest websocket message an activator may send, in bytes; a larger one closes its connection.")
	fs.IntVar(&c.MaxMessages, p+"max-messages", collectorv1.MaxStatsPerMessage, "Most WireStatMessages (revisions) in one frame; a frame with more is refused and its connection closed.")
	fs.Float64Var(&c.StatRate, p+"stat-rate", 20000, "Stats per second one activator connection may send (a frame counts at least one); frames beyond it are dropped and counted.")
	fs.IntVar(&c.StatBurst, p+"stat-burst", 2*collectorv1.MaxStatsPerMessage, "Stats one activator connection may send at once above --"+p+"stat-rate; at least --"+p+"max-messages.")
	fs.IntVar(&c.MaxConnections, p+"max-connections", 256, "Activator connections held at once; one more is refused with 503.")
	fs.Func(p+"allowed-cidrs", "Comma-separated networks (CIDRs) activators may connect from, e.g. the pod network; empty means any address. Knative's activators send no credentials.", func(v string) error {
		c.AllowedNets = nil
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			n, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("%q: want a CIDR such as 10.0.0.0/8", commonv1.Prefix(s))
			}
			c.AllowedNets = append(c.AllowedNets, n.Masked())
		}
		return nil
	})
	fs.DurationVar(&c.IdleTimeout, p+"idle-timeout", 30*time.Second, "How long an activator connection may send nothing (no frame, no ping) before it is closed.")
	fs.DurationVar(&c.BacklogWait, p+"backlog-wait", 2*time.Second, "How long a frame waits while a decider's backlog is full before its stats are dropped (after one wait in vain, a connection's frames are dropped at once until the backlog has room); keep it well below 10s, after which Knative's activator misses its pongs.")
	fs.DurationVar(&c.ForwardTimeout, p+"forward-timeout", 2*time.Second, "Longest forward of stats to the collector replica owning their revision.")
	fs.IntVar(&c.ForwardQueue, p+"forward-queue", 16, "Batches of stats waiting for one owning replica; one more is dropped and counted.")
}

// Enabled reports whether the endpoint serves.
func (c *Config) Enabled() bool { return c.Listen != "" }

// Validate refuses values that would lift a bound, naming the flag.
func (c *Config) Validate(p string) error {
	switch {
	case c.MaxFrameBytes < 64 || c.MaxFrameBytes > 64<<20:
		return fmt.Errorf("--%smax-frame-bytes %d: want 64 to %d", p, c.MaxFrameBytes, 64<<20)
	case c.MaxMessages < 1 || c.MaxMessages > collectorv1.MaxStatsPerMessage:
		return fmt.Errorf("--%smax-messages %d: want 1 to %d", p, c.MaxMessages, collectorv1.MaxStatsPerMessage)
	case !(c.StatRate > 0) || math.IsInf(c.StatRate, 0):
		return fmt.Errorf("--%sstat-rate %g: want a finite number above 0", p, c.StatRate)
	case c.StatBurst < c.MaxMessages:
		return fmt.Errorf("--%sstat-burst %d: want at least --%smax-messages (%d)", p, c.StatBurst, p, c.MaxMessages)
	case c.MaxConnections < 1:
		return fmt.Errorf("--%smax-connections %d: want at least 1", p, c.MaxConnections)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("--%sidle-timeout %s: want more than 0", p, c.IdleTimeout)
	case c.BacklogWait <= 0 || c.BacklogWait >= 10*time.Second:
		return fmt.Errorf("--%sbacklog-wait %s: want more than 0 and less than 10s (Knative's activator's pong timeout)", p, c.BacklogWait)
	case c.ForwardTimeout <= 0:
		return fmt.Errorf("--%sforward-timeout %s: want more than 0", p, c.ForwardTimeout)
	case c.ForwardQueue < 1:
		return fmt.Errorf("--%sforward-queue %d: want at least 1", p, c.ForwardQueue)
	}
	return nil
}

// allowed reports whether a caller at addr may connect.
func (c *Config) allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	return len(c.AllowedNets) == 0 || slices.ContainsFunc(c.AllowedNets, func(n netip.Prefix) bool { return n.Contains(addr) })
}
