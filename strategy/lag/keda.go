package lag

import (
	"math"
	"slices"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// kedaLags fills the per-partition lags by KEDA's getLagForPartition rules
// and returns the number of partitions considered (after
// partitionLimitation).
func (s *Scaler) kedaLags(d *Decision, in *Input) int64 {
	s.lags = s.lags[:0]
	var queried int64
	for i := range in.Partitions {
		p := &in.Partitions[i]
		c, ok := p.committed()
		pl := PartitionLag{Topic: p.Topic, ID: p.ID, End: p.End, Committed: c, HasCommitted: ok, Rule: LagPlain}
		if len(s.cfg.PartitionLimitation) > 0 && !slices.Contains(s.cfg.PartitionLimitation, p.ID) {
			pl.Rule = LagNotSelected
			s.lags = append(s.lags, pl)
			continue
		}
		queried++
		s.kedaPartitionLag(&pl)
		s.lags = append(s.lags, pl)
		d.TotalLag = satAdd(d.TotalLag, pl.Lag)
		d.TotalLagWithPersistent = satAdd(d.TotalLagWithPersistent, pl.LagWithPersistent)
		d.MaxLag = max(d.MaxLag, pl.Lag)
		if pl.Lag > 0 {
			d.LaggingPartitions++
		}
	}
	d.Partitions = s.lags
	return queried
}

func (s *Scaler) kedaPartitionLag(pl *PartitionLag) {
	if !pl.HasCommitted {
		// Early returns: previousOffsets is not touched.
		switch {
		case s.cfg.ScaleToZeroOnInvalidOffset:
			pl.Lag = 0
		case s.cfg.OffsetResetPolicy == lagconfig.ResetLatest:
			pl.Lag = 1 // keep one consumer so that it commits
		default:
			pl.Lag = pl.End // the whole log, assuming it starts at 0
		}
		pl.LagWithPersistent = pl.Lag
		pl.Rule = LagNoCommitLatest
		if s.cfg.OffsetResetPolicy == lagconfig.ResetEarliest {
			pl.Rule = LagNoCommitEarliest
		}
		return
	}
	lag := pl.End - pl.Committed
	if lag < 0 && !s.cfg.Faithful {
		// KEDA sums the negative value, so a recreated partition cancels real
		// lag elsewhere; the fixed mode counts it as 0.
		lag = 0
	}
	if pl.End < pl.Committed {
		pl.Rule = LagCommittedAhead
	}
	pl.Lag, pl.LagWithPersistent = lag, lag
	if !s.cfg.ExcludePersistentLag {
		return
	}
	prevs := &s.prevCommitted
	if pl.Topic != "" {
		if s.prevByTopic == nil {
			s.prevByTopic = map[string][]int64{}
		}
		t := s.prevByTopic[pl.Topic]
		prevs = &t
		defer func() { s.prevByTopic[pl.Topic] = t }()
	}
	for int(pl.ID) >= len(*prevs) {
		*prevs = append(*prevs, -1)
	}
	if prev := (*prevs)[pl.ID]; prev >= 0 && prev == pl.Committed {
		pl.Lag, pl.Rule = 0, LagPersistent
		return
	}
	(*prevs)[pl.ID] = pl.Committed
}

// forgetTopics drops the previous commits of topics in is no longer reads,
// so a group that moves between topics leaves nothing behind (KEDA keeps
// them, never read again).
func (s *Scaler) forgetTopics(in *Input) {
	if len(s.prevByTopic) == 0 {
		return
	}
	present := make(map[string]bool, len(s.prevByTopic))
	for i := range in.Partitions {
		present[in.Partitions[i].Topic] = true
	}
	for t := range s.prevByTopic {
		if !present[t] {
			delete(s.prevByTopic, t)
		}
	}
}

// keda is KEDA's Kafka scaler (metric and activity) followed by what KEDA's
// operator and the HPA do with them: 0→1 on activity, the AverageValue
// formula ceil(metric / lagThreshold) with tolerance and the scale-down
// stabilization window, and →minReplicaCount after cooldownPeriod inactive.
func (s *Scaler) keda(d *Decision, in *Input, now time.Time) {
	if !s.started {
		s.since = now
	}
	queried := s.kedaLags(d, in)
	s.forgetTopics(in)
	k := &d.KEDA
	k.ActivationLagThreshold = s.cfg.ActivationLagThreshold
	k.TotalLagBeforeCap = d.TotalLag
	k.TotalLag = d.TotalLag
	d.PartitionCount = int32(queried)
	if len(s.cfg.PartitionLimitation) == 0 && in.PartitionCount > d.PartitionCount {
		// Partitions missing from the sample count with lag 0, as KEDA does
		// for a partition missing from the offsets response.
		d.PartitionCount = in.PartitionCount
	}

	thr := s.cfg.LagThreshold
	if s.cfg.EnsureEvenDistributionOfPartitions {
		// The total stands for the smallest factor of the partition count
		// that covers it, so the consumers share the partitions evenly;
		// beyond the largest factor (the count itself) the cap below holds.
		if f, ok := nextFactor(k.TotalLag, int64(d.PartitionCount), thr); ok {
			k.TotalLag = f * thr
		}
	}
	if !s.cfg.AllowIdleConsumers || s.cfg.LimitToPartitionsWithLag || s.cfg.EnsureEvenDistributionOfPartitions {
		k.CapApplies = true
		k.UpperBound = int64(d.PartitionCount)
		d.CapReason = CapPartitions
		if s.cfg.LimitToPartitionsWithLag {
			k.UpperBound = int64(d.LaggingPartitions)
			d.CapReason = CapPartitionsWithLag
		}
		var over bool
		if s.cfg.Faithful {
			over = k.TotalLag/thr > k.UpperBound // KEDA: truncating int64 division
		} else {
			// Never more replicas than the bound: ceil(total/thr) > bound,
			// written without the product, which could overflow.
			over = k.TotalLag > 0 && (k.TotalLag-1)/thr >= k.UpperBound
		}
		if over {
			k.TotalLag = k.UpperBound * thr // <= the uncapped total: no overflow
			d.Cap = int32(min(k.UpperBound, maxInt32))
		} else {
			d.CapReason = CapNone
		}
	}
	k.Metric = max(float64(k.TotalLag), 0)
	k.Active = d.TotalLagWithPersistent > s.cfg.ActivationLagThreshold
	if k.Active {
		s.lastActive, s.hasActive = now, true
	}
	ref := s.since
	if s.hasActive {
		ref = s.lastActive
	}
	k.LastActive = s.lastActive
	k.CooldownDeadline = ref.Add(s.cfg.IdleTimeout)

	cur := s.current
	lo := max(s.cfg.MinReplicas, 1)
	k.Recommendation = s.hpaRecommendation(k, cur, lo)
	d.Proposal = k.Recommendation
	d.Target = d.Proposal
	if d.CapReason == CapNone {
		d.Cap = s.cfg.MaxReplicas
		if k.Recommendation == s.cfg.MaxReplicas && k.Metric/float64(thr) > float64(s.cfg.MaxReplicas) {
			d.CapReason = CapMaxReplicas
		}
	}

	switch {
	case cur == 0 && k.Active:
		// KEDA's operator scales from zero; the HPA takes over next poll.
		d.Desired = lo
		d.Reason = ReasonActivate
		s.resetRecs()
	case cur == 0:
		d.Desired = s.cfg.MinReplicas
		d.Reason = ReasonIdle
	case !k.Active && s.cfg.MinReplicas == 0 && now.After(k.CooldownDeadline):
		d.Desired = 0
		d.Reason = ReasonCooldown
		s.resetRecs()
	default:
		k.Stabilized = s.stabilize(now, k.Recommendation)
		d.Desired = k.Stabilized
		d.Reason = ReasonProposal
		switch {
		case k.WithinTolerance && d.Desired == cur:
			d.Reason = ReasonTolerance
		case k.Stabilized > k.Recommendation:
			d.Reason = ReasonStabilized
		}
		if !k.Active && s.cfg.MinReplicas == 0 {
			d.Idle.Counting, d.Idle.Deadline = true, k.CooldownDeadline
		}
	}
}

// hpaRecommendation is the HPA's AverageValue arithmetic for one external
// metric: keep cur while |metric / (lagThreshold * cur) - 1| <= tolerance,
// else ceil(metric / lagThreshold), clamped to [lo, maxReplicaCount].
func (s *Scaler) hpaRecommendation(k *KEDAResult, cur, lo int32) int32 {
	thr := float64(s.cfg.LagThreshold)
	if cur > 0 {
		ratio := k.Metric / (thr * float64(cur))
		if math.Abs(ratio-1) <= s.cfg.Tolerance {
			k.WithinTolerance = true
			return min(max(cur, lo), s.cfg.MaxReplicas)
		}
	}
	want := math.Ceil(k.Metric / thr)
	if want >= float64(s.cfg.MaxReplicas) {
		return s.cfg.MaxReplicas
	}
	return max(int32(want), lo)
}

// stabilize records rec and returns the highest recommendation within the
// scale-down stabilization window (scale-up is not delayed: the window
// includes rec itself).
func (s *Scaler) stabilize(now time.Time, rec int32) int32 {
	n := len(s.recs)
	if n == 0 {
		return rec
	}
	idx := (s.recHead + s.recLen) % n
	if s.recLen == n {
		s.recHead = (s.recHead + 1) % n
	} else {
		s.recLen++
	}
	s.recs[idx] = recommendation{at: now, replicas: rec}
	best := rec
	cutoff := now.Add(-s.cfg.ScaleDownStabilization)
	for i := 0; i < s.recLen; i++ {
		r := &s.recs[(s.recHead+i)%n]
		if r.at.After(cutoff) && r.replicas > best {
			best = r.replicas
		}
	}
	return best
}

func (s *Scaler) resetRecs() { s.recHead, s.recLen = 0, 0 }

// nextFactor returns the smallest factor f of partitions with
// f × threshold ≥ total; ok is false when there is none (no partitions, or
// a total above partitions × threshold).
func nextFactor(total, partitions, threshold int64) (int64, bool) {
	for f := int64(1); f <= partitions; f++ {
		if partitions%f != 0 {
			continue
		}
		// f*threshold >= total without the product, which could overflow.
		if total <= 0 || (total-1)/threshold < f {
			return f, true
		}
	}
	return 0, false
}
