package keepalive

import (
	"fmt"
	"strings"
	"time"
)

// IdleAfter is how long a target goes without a request before the policy
// counts it idle: two of the decider's 2 s ticks, so one quiet scrape (or a
// request that fell between two scrapes) never ends a busy period.
const IdleAfter = 4 * time.Second

// State is one target's memory: its idle-time histogram and when it last
// saw a request. The zero value has seen nothing.
type State struct {
	hist Histogram
	// lastActive is the time of the last sample with a request; zero
	// before the first.
	lastActive time.Time
}

// Histogram returns a copy of the idle-time histogram.
func (s *State) Histogram() Histogram { return s.hist }

// LastActive is the time of the last sample that saw a request; zero before
// the first.
func (s *State) LastActive() time.Time { return s.lastActive }

// Observe takes a sample at that saw requests (in flight, or arriving). A
// sample at least IdleAfter after the previous one ends an idle time, which
// the histogram counts; it returns that idle time and true. Samples at or
// before the last one change nothing, so a sample counted once (live, or in
// the state a restarted decider rebuilt from) is never counted twice.
func (s *State) Observe(at time.Time) (idle time.Duration, counted bool) {
	if !at.After(s.lastActive) {
		return 0, false
	}
	prev := s.lastActive
	s.lastActive = at
	if prev.IsZero() {
		return 0, false
	}
	if idle = at.Sub(prev); idle < IdleAfter {
		return 0, false
	}
	s.hist.Add(idle)
	return idle, true
}

// Newer reports whether o has seen a request later than s: a state read
// back from where it was stored replaces the one held only when it is.
func (s *State) Newer(o *State) bool { return o.lastActive.After(s.lastActive) }

// Phase is where a target stands in its idle period.
type Phase uint8

const (
	// PhaseUnknown: no request seen yet; Knative decides.
	PhaseUnknown Phase = iota
	// PhaseBusy: a request within IdleAfter; Knative decides.
	PhaseBusy
	// PhaseFallback: idle, idle times not predictable; Knative decides,
	// with its fixed grace.
	PhaseFallback
	// PhaseKeepWarm: idle, the next request predicted within the first
	// minute: one pod kept warm until the tail.
	PhaseKeepWarm
	// PhaseUnloaded: idle, the next request predicted later: at zero until
	// the pre-warm.
	PhaseUnloaded
	// PhasePreWarm: idle, within the predicted window: one pod warm.
	PhasePreWarm
	// PhaseLate: idle past the predicted window: at zero.
	PhaseLate
)

func (p Phase) String() string {
	switch p {
	case PhaseUnknown:
		return "unknown"
	case PhaseBusy:
		return "busy"
	case PhaseFallback:
		return "fallback"
	case PhaseKeepWarm:
		return "keep-warm"
	case PhaseUnloaded:
		return "unloaded"
	case PhasePreWarm:
		return "pre-warm"
	case PhaseLate:
		return "late"
	default:
		return fmt.Sprintf("Phase(%d)", uint8(p))
	}
}

// Decision is the policy's answer at one time, with what it was made from.
type Decision struct {
	At    time.Time
	Phase Phase
	// Knative is the desired scale Knative's rules gave (-1 when unknown);
	// Desired is the policy's. They differ only while the target is idle
	// and predictable.
	Knative, Desired int32
	// Predicted is true when Desired is 0 by the policy's prediction: the
	// reconciler then removes the last pod without the fixed grace.
	Predicted bool
	// LastActive is when the target last saw a request; IdleFor is At less
	// it (0 when unknown).
	LastActive time.Time
	IdleFor    time.Duration
	// Prediction is the histogram's reading.
	Prediction Prediction
}

// WarmFrom and WarmUntil bound the predicted warm window (zero when not
// predictable or nothing seen).
func (d *Decision) WarmFrom() time.Time {
	if !d.Prediction.Predictable() || d.LastActive.IsZero() {
		return time.Time{}
	}
	return d.LastActive.Add(d.Prediction.PreWarm)
}

// WarmUntil is the end of the predicted warm window.
func (d *Decision) WarmUntil() time.Time {
	if !d.Prediction.Predictable() || d.LastActive.IsZero() {
		return time.Time{}
	}
	return d.LastActive.Add(d.Prediction.Until)
}

// Next is when the decision changes if no request comes: the end of the
// busy period, the pre-warm or the end of the warm window; zero when
// nothing is due.
func (d *Decision) Next() time.Time {
	switch d.Phase {
	case PhaseBusy:
		return d.LastActive.Add(IdleAfter)
	case PhaseUnloaded:
		return d.WarmFrom()
	case PhaseKeepWarm, PhasePreWarm:
		return d.WarmUntil()
	}
	return time.Time{}
}

// Decide applies the policy at now to Knative's desired scale (-1 when it
// has none yet). While the target is busy, or its idle times are not
// predictable, Knative's number stands; while it is idle and predictable
// the policy's does: one warm pod inside the predicted window (or Knative's
// number, if higher), zero outside it.
func (s *State) Decide(now time.Time, knative int32) Decision {
	d := Decision{At: now, Knative: knative, Desired: knative, LastActive: s.lastActive, Prediction: s.hist.Predict()}
	if s.lastActive.IsZero() {
		d.Phase = PhaseUnknown
		return d
	}
	d.IdleFor = max(now.Sub(s.lastActive), 0)
	p := &d.Prediction
	switch {
	case d.IdleFor < IdleAfter:
		d.Phase = PhaseBusy
	case !p.Predictable():
		d.Phase = PhaseFallback
	case p.PreWarm == 0 && d.IdleFor < p.Until:
		d.Phase, d.Desired = PhaseKeepWarm, max(knative, 1)
	case d.IdleFor < p.PreWarm:
		d.Phase, d.Desired, d.Predicted = PhaseUnloaded, 0, true
	case d.IdleFor < p.Until:
		d.Phase, d.Desired = PhasePreWarm, max(knative, 1)
	default:
		d.Phase, d.Desired, d.Predicted = PhaseLate, 0, true
	}
	return d
}

// Reason is one line: why the target is warm or at zero.
func (d *Decision) Reason() string {
	p := &d.Prediction
	switch d.Phase {
	case PhaseUnknown:
		return "keep-alive: no request seen yet; Knative's rules decide"
	case PhaseBusy:
		return "keep-alive: busy; Knative's rules decide"
	case PhaseFallback:
		return "keep-alive: fixed grace (" + p.fallbackDetail() + ")"
	case PhaseKeepWarm:
		return fmt.Sprintf("keep-alive: warm, next request predicted within %s of the last (p99 %s)", fmtDur(p.Until), fmtDur(p.Tail))
	case PhaseUnloaded:
		return fmt.Sprintf("keep-alive: zero, pre-warm at %s (idle %s; p5 %s, p99 %s)", fmtDur(p.PreWarm), fmtDur(d.IdleFor), fmtDur(p.Head), fmtDur(p.Tail))
	case PhasePreWarm:
		return fmt.Sprintf("keep-alive: pre-warmed, next request predicted by %s (idle %s; p5 %s, p99 %s)", fmtDur(p.Until), fmtDur(d.IdleFor), fmtDur(p.Head), fmtDur(p.Tail))
	case PhaseLate:
		return fmt.Sprintf("keep-alive: zero, the request predicted by %s is late (idle %s)", fmtDur(p.Until), fmtDur(d.IdleFor))
	}
	return "keep-alive: " + d.Phase.String()
}

func (p *Prediction) fallbackDetail() string {
	switch p.Fallback {
	case FewSamples:
		return fmt.Sprintf("%d idle times, want %d", p.Samples, MinSamples)
	case OutOfRange:
		return fmt.Sprintf("out of range: the 99th percentile is beyond %s, %d of %d idle times", fmtDur(Range), p.OutOfRange, p.Samples)
	case TooWide:
		if p.Tail-p.Head > MaxSpread {
			return fmt.Sprintf("too wide: p5 to p99 span %s, want at most %s", fmtDur(p.Tail-p.Head), fmtDur(MaxSpread))
		}
		return fmt.Sprintf("too wide: bin counts' CV %.2f, want at least %.0f", p.CV, MinCV)
	}
	return p.Fallback.String()
}

// Explain renders the decision on several lines, for humans.
func (d *Decision) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", d.Reason())
	p := &d.Prediction
	if d.LastActive.IsZero() {
		fmt.Fprintf(&b, "  no request seen; %d idle times held\n", p.Samples)
		return b.String()
	}
	fmt.Fprintf(&b, "  last request %s, idle %s; Knative's desired %d, policy's %d\n",
		d.LastActive.UTC().Format(time.RFC3339), fmtDur(d.IdleFor), d.Knative, d.Desired)
	fmt.Fprintf(&b, "  idle times: %d (%d beyond %s), bin counts' CV %.2f", p.Samples, p.OutOfRange, fmtDur(Range), p.CV)
	if p.HeadKnown {
		fmt.Fprintf(&b, ", p5 bin from %s", fmtDur(p.Head))
	}
	if p.TailKnown {
		fmt.Fprintf(&b, ", p99 bin to %s", fmtDur(p.Tail))
	}
	b.WriteString("\n")
	if p.Predictable() {
		fmt.Fprintf(&b, "  warm window %s to %s after the last request (%s to %s)\n", fmtDur(p.PreWarm), fmtDur(p.Until),
			d.WarmFrom().UTC().Format(time.RFC3339), d.WarmUntil().UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(&b, "  not predictable: %s; the fixed scale-to-zero grace applies\n", p.fallbackDetail())
	}
	return b.String()
}

// fmtDur writes a duration without trailing zero units: 8m6s, 11m, 4h.
func fmtDur(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
