package lag

import "time"

// riffLags fills the per-partition lags the way riff's lag tracker and
// inspector read them: a partition without a commit counts from offset 0.
// A committed offset ahead of the end counts 0 (riff v0.0.5 ignored it
// through its max; v0.0.6 would have subtracted it from the queue).
func (s *Scaler) riffLags(d *Decision, in *Input) (sumEnd, sumCurrent int64) {
	s.lags = s.lags[:0]
	for i := range in.Partitions {
		p := &in.Partitions[i]
		c, ok := p.committed()
		pl := PartitionLag{ID: p.ID, End: p.End, Committed: c, HasCommitted: ok, Rule: LagPlain}
		if !ok {
			pl.Rule = LagNoCommitFromZero
		}
		pl.Lag = p.End - c
		if pl.Lag < 0 {
			pl.Lag, pl.Rule = 0, LagCommittedAhead
		}
		pl.LagWithPersistent = pl.Lag
		s.lags = append(s.lags, pl)

		sumEnd = satAdd(sumEnd, p.End)
		sumCurrent = satAdd(sumCurrent, c)
		d.TotalLag = satAdd(d.TotalLag, pl.Lag)
		d.MaxLag = max(d.MaxLag, pl.Lag)
		if pl.Lag > 0 {
			d.LaggingPartitions++
		}
	}
	d.TotalLagWithPersistent = d.TotalLag
	d.Partitions = s.lags
	return sumEnd, sumCurrent
}

// riffCap is the bound on the proposal. Faithful: min(maxReplicas, Topic
// resource partitions), 1 without a Topic resource, as riff's max-replicas
// policy. Fixed: the real partition count the collector reports.
func (s *Scaler) riffCap(d *Decision, in *Input) {
	switch {
	case s.cfg.Faithful && s.cfg.DeclaredPartitions > 0:
		d.PartitionCount, d.CapReason = s.cfg.DeclaredPartitions, CapDeclaredPartitions
	case s.cfg.Faithful:
		d.PartitionCount, d.CapReason = 1, CapNoTopicResource
	default:
		d.PartitionCount, d.CapReason = int32(len(in.Partitions)), CapPartitions
		if in.PartitionCount > 0 {
			d.PartitionCount = in.PartitionCount
		}
	}
	d.Cap = d.PartitionCount
	if s.cfg.MaxReplicas >= 0 && s.cfg.MaxReplicas <= d.Cap {
		d.Cap, d.CapReason = s.cfg.MaxReplicas, CapMaxReplicas
	}
}

// OffsetPolicy is riff v0.0.5's lag→replicas map. With maxLag the largest
// per-partition lag and M the cap:
//
//	slope = (M - 1) / (lagForMax - lagForOne)           (float32)
//	r     = trunc(1 + (maxLag - lagForOne) * slope)      if slope > 0
//	      = 1 if maxLag >= lagForOne, else 0             otherwise
//
// clamped to [0, M]. So lag 0 → 0, lagForOne → 1, lagForMax and above → M.
// Out-of-range values are clamped before the float→int conversion (riff's
// conversion overflowed to a negative count, and so to 0, for lags near 2^31).
func OffsetPolicy(maxLag int64, m int32, lagForOne, lagForMax int64) int32 {
	if m <= 0 {
		return 0
	}
	slope := (float32(m) - 1) / (float32(lagForMax) - float32(lagForOne))
	if slope > 0 {
		// Explicit conversions round every step to float32, as riff's
		// float32 arithmetic did, and forbid fused multiply-add.
		x := float32(float32(maxLag) - float32(lagForOne))
		r := float32(1 + float32(x*slope))
		switch {
		case r < 1: // trunc of (-1, 1) is 0, and below that clamps to 0
			return 0
		case r >= float32(m):
			return m
		}
		return int32(r)
	}
	if maxLag >= lagForOne {
		return 1
	}
	return 0
}

// smoothingWeight is riff's smoother weight (the same constant in v0.0.5
// and v0.0.6).
const smoothingWeight float32 = 0.05

// smooth is riff's smoother step: an EMA with weight 0.05 in float32, rounded
// half up, except that a positive target at 0 replicas gives 1 at once and
// resets the memory to 1.
func smooth(memory float32, target, current int32) Smoothing {
	next := float32(memory + float32((float32(target)-memory)*smoothingWeight))
	sm := Smoothing{Before: memory, After: next, Rounded: int32(float32(0.5) + next)}
	if target > 0 && current == 0 {
		sm.After, sm.Rounded, sm.FromZero = 1, 1, true
	}
	return sm
}

// smoothTarget runs d.Target through the scaler's smoothing memory (both
// riff modes smooth alike), records the step and its reason in d, and
// returns the rounded count.
func (s *Scaler) smoothTarget(d *Decision) int32 {
	d.Smoothing = smooth(s.memory, d.Target, s.current)
	s.memory = d.Smoothing.After
	d.Reason = ReasonProposal
	if d.Smoothing.FromZero {
		d.Reason = ReasonFromZero
	}
	return d.Smoothing.Rounded
}

// offset is riff-offset (v0.0.5): policy(max lag) → smoother → delayer.
func (s *Scaler) offset(d *Decision, in *Input, now time.Time) {
	sumEnd, sumCurrent := s.riffLags(d, in)
	s.riffCap(d, in)
	d.Proposal = OffsetPolicy(d.MaxLag, d.Cap, s.cfg.LagForOne, s.cfg.LagForMax)
	d.Target = d.Proposal
	if !s.cfg.Faithful && d.Target > d.LaggingPartitions {
		// One hot partition cannot use more than one consumer.
		d.Target, d.CapReason = d.LaggingPartitions, CapLaggingPartitions
	} else if d.Proposal < d.Cap {
		d.CapReason = CapNone
	}

	a := s.current
	r := s.smoothTarget(d)

	// The delayer: hold the current count for IdleTimeout before going to 0,
	// restarting on any write; never scale up while no offset moves.
	grew := sumEnd > s.prevEnd // riff compared with 0 when there was no previous tick
	same := s.hasPrev && sumEnd == s.prevEnd && sumCurrent == s.prevCurrent
	out := r
	switch {
	case r == 0 && a > 0:
		switch {
		case !s.hasZeroSince:
			s.zeroSince, s.hasZeroSince = now, true
			out = a
			d.Reason = ReasonIdleHold
		case now.Before(s.zeroSince.Add(s.cfg.IdleTimeout)):
			out = a
			d.Reason = ReasonIdleHold
			d.Idle.Deadline = s.zeroSince.Add(s.cfg.IdleTimeout)
			if grew {
				s.hasZeroSince = false
				d.Idle.Restarted = true
			}
		default:
			s.hasZeroSince = false
			d.Reason = ReasonIdleExpired
		}
		if out > 0 {
			d.Idle.Holding, d.Idle.Held = true, out
		}
	case r > a && a > 0:
		s.hasZeroSince = false
		if same {
			out = a
			d.Stalled = true
			d.Reason = ReasonStalledHold
		}
	case r < a:
		s.hasZeroSince = false
	}
	if s.hasZeroSince {
		d.Idle.Counting, d.Idle.Deadline = true, s.zeroSince.Add(s.cfg.IdleTimeout)
	}
	if out == 0 && d.Reason == ReasonProposal {
		d.Reason = ReasonIdle
	}
	s.prevEnd, s.prevCurrent, s.hasPrev = sumEnd, sumCurrent, true
	d.Desired = out
}

// queue is riff-queue (v0.0.6+): writes-or-queue → cap → smoother → hold
// while the queue is non-empty → delayer. queryFailed is faithful riff's
// inspector error, which counts as a queue of 1.
func (s *Scaler) queue(d *Decision, in *Input, now time.Time, queryFailed bool) {
	d.Writes, d.WritesDerived = in.Writes, !in.WritesKnown
	if queryFailed {
		d.QueueLength = -1
		d.Partitions = nil
		if !in.WritesKnown {
			d.Writes = 0
		}
	} else {
		s.riffLags(d, in)
		writes := s.observeEnds(in.Partitions)
		if !in.WritesKnown {
			d.Writes = writes
		}
		d.QueueLength = d.TotalLag
	}
	d.QueueLengthCalls = 1
	nonEmpty := queryFailed || d.QueueLength > 0

	// 1. metrics: any write proposes 1. 2. a non-empty queue proposes one
	// replica per message (fixed: at most one per lagging partition).
	var p int64
	if d.Writes > 0 {
		p = 1
	}
	lagClamped := false
	switch {
	case queryFailed:
		p = 1
	case d.QueueLength > 0:
		p = d.QueueLength
		if !s.cfg.Faithful && p > int64(d.LaggingPartitions) {
			p, lagClamped = int64(d.LaggingPartitions), true
		}
	}
	d.Proposal = int32(min(p, int64(maxInt32)))

	// 3. cap.
	s.riffCap(d, in)
	d.Target = d.Proposal
	switch {
	case d.Target >= d.Cap:
		d.Target = d.Cap
	case lagClamped:
		d.CapReason = CapLaggingPartitions
	default:
		d.CapReason = CapNone
	}

	// 4. smooth.
	a := s.current
	r := s.smoothTarget(d)

	// 5. hold one replica while the queue is non-empty (riff re-queried the
	// queue here; the collector samples once per tick, so the same value is
	// reused).
	if r == 0 && a != 0 {
		d.QueueLengthCalls = 2
		if nonEmpty {
			r = 1
			d.Reason = ReasonQueueHold
		}
	}

	// 6. delay: hold the last positive value for IdleTimeout after the first
	// zero. Fixed: a write during the countdown restarts it (riff's FIXME),
	// so trickle traffic does not flap to zero.
	if r > 0 {
		s.dValue, s.dPrevious, s.dDeadline = r, r, now
	} else if s.dValue > 0 {
		if now.After(s.dDeadline) {
			s.dDeadline = now.Add(s.cfg.IdleTimeout)
			s.dPrevious = s.dValue
		}
		s.dValue = 0
	} else if !s.cfg.Faithful && d.Writes > 0 && now.Before(s.dDeadline) {
		s.dDeadline = now.Add(s.cfg.IdleTimeout)
		d.Idle.Restarted = true
	}
	out := s.dValue
	if now.Before(s.dDeadline) {
		out = s.dPrevious
	}
	if r == 0 {
		if now.Before(s.dDeadline) {
			d.Idle.Counting, d.Idle.Deadline = true, s.dDeadline
			if out > 0 {
				d.Idle.Holding, d.Idle.Held = true, out
				d.Reason = ReasonIdleHold
			}
		} else if a > 0 {
			d.Reason = ReasonIdleExpired
		} else {
			d.Reason = ReasonIdle
		}
	}
	d.Desired = out
}

const maxInt32 = 1<<31 - 1
