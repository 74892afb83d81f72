package lag

import (
	"fmt"
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Scaler is the state of one target. It is not safe for concurrent use;
// Set serialises access.
type Scaler struct {
	cfg lagconfig.Config

	// started is false until the first tick with data.
	started bool
	// current is the replica count the strategy reasons from. Faithful riff:
	// the controller's actualReplicas (its last request, overwritten by every
	// observed status). Fixed modes: its own last decision, seeded once from
	// the first observed count, so a stale status cannot disturb it.
	current int32

	// memory is the smoother's float32 EMA (riff modes).
	memory float32

	// riff-offset delayer: the scale-to-zero decision time and the previous
	// tick's combined end and committed positions.
	zeroSince    time.Time
	hasZeroSince bool
	prevEnd      int64
	prevCurrent  int64
	hasPrev      bool

	// riff-queue delayer (riff's Delayer): value, previousValue, deadline.
	dValue    int32
	dPrevious int32
	dDeadline time.Time

	// prevEndByID is each partition's previous end offset (-1: unknown), for
	// deriving writes when the collector does not report them.
	prevEndByID []int64

	// KEDA: previousOffsets keyed by partition id (-1: not stored), the last
	// active tick, the first tick, and the HPA's recommendation window.
	prevCommitted []int64
	// prevByTopic is prevCommitted for an input of several topics.
	prevByTopic map[string][]int64
	lastActive  time.Time
	hasActive   bool
	since       time.Time
	recs        []recommendation
	recHead     int
	recLen      int

	// Scratch, reused every tick.
	lags []PartitionLag
	seen []uint32
	gen  uint32

	last Decision
}

type recommendation struct {
	at       time.Time
	replicas int32
}

// New returns a Scaler for cfg, which must be valid.
func New(cfg lagconfig.Config) (*Scaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scaler{}
	s.setConfig(cfg)
	return s, nil
}

// lagconfig.Config returns the target's configuration.
func (s *Scaler) Config() lagconfig.Config { return s.cfg }

// Reconfigure applies a new configuration and keeps the state, except where
// the original reset it: faithful riff-queue rebuilds its chain (smoothing
// memory and delayer) when the topic changes, as riff did on an input change.
// A topic change forgets per-partition history in every mode.
func (s *Scaler) Reconfigure(cfg lagconfig.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	topicChanged := cfg.Topic != s.cfg.Topic
	if cfg.Mode != s.cfg.Mode {
		// A new algorithm starts afresh from the replica count it inherits.
		*s = Scaler{current: s.current, lags: s.lags, seen: s.seen, gen: s.gen}
	} else if topicChanged {
		if cfg.Mode == lagconfig.ModeRiffQueue && cfg.Faithful {
			s.memory = 0
			s.dValue, s.dPrevious, s.dDeadline = 0, 0, time.Time{}
		}
		s.prevEndByID = s.prevEndByID[:0]
		s.prevCommitted = s.prevCommitted[:0]
		s.prevByTopic = nil
	}
	s.setConfig(cfg)
	return nil
}

func (s *Scaler) setConfig(cfg lagconfig.Config) {
	s.cfg = cfg
	s.cfg.PartitionLimitation = append([]int32(nil), cfg.PartitionLimitation...)
	if cfg.Mode == lagconfig.ModeKEDA {
		// One slot per tick of the window, plus the current one.
		n := int(cfg.ScaleDownStabilization/cfg.TickInterval) + 2
		n = min(n, 4096)
		if cap(s.recs) < n {
			s.recs = make([]recommendation, n)
		}
		s.recs = s.recs[:n]
		s.recHead, s.recLen = 0, 0
	}
}

// Last returns the most recent Decision. Its Partitions aliases the
// Scaler's buffer until the next Decide.
func (s *Scaler) Last() Decision { return s.last }

// Decide runs one tick at now with in, and returns the Decision. It never
// panics on bad input: it holds the previous decision and says why.
func (s *Scaler) Decide(in *Input, now time.Time) Decision {
	if in == nil {
		in = &Input{FetchFailed: true}
	}
	d := Decision{
		Mode:             s.cfg.Mode,
		Faithful:         s.cfg.Faithful,
		Time:             now,
		ObservedReplicas: in.Replicas,
		ObservedKnown:    in.ReplicasKnown && in.Replicas >= 0,
	}
	if d.ObservedKnown {
		switch {
		case s.cfg.Faithful || s.cfg.Mode == lagconfig.ModeKEDA:
			// riff's informer overwrites actualReplicas; the HPA reads the
			// scale subresource.
			s.current = in.Replicas
		case !s.started:
			s.seed(in.Replicas)
		}
	}
	d.ReplicasBefore = s.current

	fetchFailed := in.FetchFailed
	if !fetchFailed {
		s.gen++
		if s.gen == 0 { // wrapped: clear the marks so none matches
			clear(s.seen)
			s.gen = 1
		}
		var err error
		if s.seen, err = checkInput(in, s.seen, s.gen); err != nil {
			return s.hold(d, StatusBadInput, err)
		}
	}
	if !fetchFailed && in.Partitions[0].Topic != "" {
		switch {
		case s.cfg.Mode != lagconfig.ModeKEDA:
			return s.hold(d, StatusBadInput, badInput("partitions of several topics: %s reads one input topic", s.cfg.Mode))
		case len(s.cfg.PartitionLimitation) > 0:
			// KEDA applies partitionLimitation only to the topic it names.
			return s.hold(d, StatusBadInput, badInput("partitions of several topics with partitionLimitation, which names the partitions of one"))
		}
	}
	switch {
	case fetchFailed && s.cfg.Mode == lagconfig.ModeRiffQueue && s.cfg.Faithful:
		s.queue(&d, in, now, true) // riff counted the error as a queue of 1
	case fetchFailed:
		return s.hold(d, StatusNoData, errFetchFailed)
	case s.cfg.Mode == lagconfig.ModeRiffOffset:
		s.offset(&d, in, now)
	case s.cfg.Mode == lagconfig.ModeRiffQueue:
		s.queue(&d, in, now, false)
	default:
		s.keda(&d, in, now)
	}
	s.finish(&d)
	return d
}

// errFetchFailed is shared so that an outage does not allocate per target.
var errFetchFailed = fmt.Errorf("%w: offset fetch failed", ErrNoData)

// seed starts a fixed-mode target from the count it already runs at, so a
// restarted decider does not knock a running function back to 1.
func (s *Scaler) seed(replicas int32) {
	s.current = replicas
	s.memory = float32(replicas)
	if replicas > 0 {
		s.dValue, s.dPrevious = replicas, replicas
	}
}

// hold keeps the previous decision when the tick has no usable data.
func (s *Scaler) hold(d Decision, st Status, err error) Decision {
	d.Status, d.Err = st, err
	d.Reason = ReasonHoldNoData
	if st == StatusBadInput {
		d.Reason = ReasonHoldBadInput
	}
	d.Desired = s.current
	d.Idle = s.idleState(d.Time)
	d.ScaleNeeded = !s.cfg.Faithful && d.ObservedKnown && d.Desired != d.ObservedReplicas
	d.Partitions = nil
	s.last = d
	return d
}

func (s *Scaler) finish(d *Decision) {
	if s.cfg.Faithful || !d.ObservedKnown {
		// riff calls Scale only when its belief differs, and records the
		// request as applied even if Scale failed.
		d.ScaleNeeded = d.Desired != s.current
	} else {
		// Compare with what really runs: a failed Scale is retried next tick.
		d.ScaleNeeded = d.Desired != d.ObservedReplicas
	}
	s.current = d.Desired
	s.started = true
	s.last = *d
}

// idleState reports the running countdown without changing it.
func (s *Scaler) idleState(now time.Time) Idle {
	switch s.cfg.Mode {
	case lagconfig.ModeRiffOffset:
		if s.hasZeroSince {
			return Idle{Counting: true, Deadline: s.zeroSince.Add(s.cfg.IdleTimeout)}
		}
	case lagconfig.ModeRiffQueue:
		if s.dValue == 0 && now.Before(s.dDeadline) {
			return Idle{Counting: true, Deadline: s.dDeadline}
		}
	case lagconfig.ModeKEDA:
		if !s.hasActive {
			return Idle{}
		}
		return Idle{Counting: true, Deadline: s.lastActive.Add(s.cfg.IdleTimeout)}
	}
	return Idle{}
}

// observeEnds derives riff-queue's write count from end-offset growth and
// remembers this tick's ends. A partition seen for the first time counts no
// writes; one whose end went backwards (topic recreated) counts none.
func (s *Scaler) observeEnds(parts []Partition) int64 {
	var writes int64
	for i := range parts {
		p := &parts[i]
		for int(p.ID) >= len(s.prevEndByID) {
			s.prevEndByID = append(s.prevEndByID, -1)
		}
		if prev := s.prevEndByID[p.ID]; prev >= 0 && p.End > prev {
			writes = satAdd(writes, p.End-prev)
		}
		s.prevEndByID[p.ID] = p.End
	}
	return writes
}

// satAdd adds without wrapping: lag sums saturate at the int64 limits.
func satAdd(a, b int64) int64 {
	c := a + b
	switch {
	case a > 0 && b > 0 && c < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && c >= 0:
		return math.MinInt64
	}
	return c
}
