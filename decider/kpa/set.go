package kpa

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Key names a target (a Knative revision's PodAutoscaler).
type Key struct {
	Namespace string
	Name      string
	// Kind is "" for an apps Deployment, else "Kind.group"
	// (targetkey.Qualifier): targets of two kinds may share a name.
	Kind string
}

func (k Key) String() string {
	if k.Kind != "" {
		return k.Namespace + "/" + k.Kind + "/" + k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Source says where a stat came from.
type Source uint8

const (
	// SourceScraper is a revision-wide stat from the pod scraper.
	SourceScraper Source = iota
	// SourceActivator is a stat pushed by an activator; only these can poke.
	SourceActivator
)

func (s Source) String() string {
	if s == SourceActivator {
		return "activator"
	}
	return "scraper"
}

// Stat is one revision-wide observation (Knative's metrics.Stat without the
// pod name). Every field must be finite, ≥ 0 and at most MaxStatValue.
type Stat struct {
	AverageConcurrentRequests        float64
	AverageProxiedConcurrentRequests float64
	RequestCount                     float64
	ProxiedRequestCount              float64
}

// MaxStatValue bounds every stat field. It is far above any real revision's
// load, and keeps window sums finite.
const MaxStatValue = 1e12

// MaxFutureSkew is how far ahead of now a stat's timestamp may be; clocks of
// the collector replicas differ a little, but a stat from the future would
// push the windows ahead of the tick and hide the present.
const MaxFutureSkew = 5 * time.Second

// DropReason says why a stat was refused; the zero value means it was kept.
// Its String is meant for a metric label.
type DropReason uint8

const (
	// Kept means the stat was recorded.
	Kept DropReason = iota
	// DropUnknownTarget means no target has the stat's key.
	DropUnknownTarget
	// DropBadValue means a field was NaN, infinite, negative or above
	// MaxStatValue.
	DropBadValue
	// DropFuture means the timestamp is more than MaxFutureSkew after now.
	DropFuture
	// DropTooOld means the timestamp is a whole stable window or more before
	// now, where it could not affect any average.
	DropTooOld
)

func (r DropReason) String() string {
	switch r {
	case Kept:
		return "kept"
	case DropUnknownTarget:
		return "unknown_target"
	case DropBadValue:
		return "bad_value"
	case DropFuture:
		return "future"
	case DropTooOld:
		return "too_old"
	default:
		return fmt.Sprintf("DropReason(%d)", uint8(r))
	}
}

// TickInterval is how often the shell should call Tick (Knative's
// tickInterval; not configurable there either).
const TickInterval = 2 * time.Second

// ErrUnknownTarget is returned for a key the Set does not hold.
var ErrUnknownTarget = errors.New("unknown target")

// ErrTargetExists is returned by Create for a key the Set already holds.
var ErrTargetExists = errors.New("target exists")

// checkStat validates a stat's fields and timestamp against now and the
// stable window.
func checkStat(at, now time.Time, s *Stat, stable time.Duration) (DropReason, error) {
	for _, f := range [...]struct {
		name string
		v    float64
	}{
		{"average_concurrent_requests", s.AverageConcurrentRequests},
		{"average_proxied_concurrent_requests", s.AverageProxiedConcurrentRequests},
		{"request_count", s.RequestCount},
		{"proxied_request_count", s.ProxiedRequestCount},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > MaxStatValue {
			return DropBadValue, fmt.Errorf("stat %s %v: want a number in [0, %g]", f.name, f.v, float64(MaxStatValue))
		}
	}
	if at.After(now.Add(MaxFutureSkew)) {
		return DropFuture, fmt.Errorf("stat timestamp %s: more than %v after now %s", at.UTC().Format(time.RFC3339Nano), MaxFutureSkew, now.UTC().Format(time.RFC3339Nano))
	}
	if at.Unix()+int64(stable/time.Second) <= now.Unix() {
		return DropTooOld, fmt.Errorf("stat timestamp %s: a stable window (%v) or more before now %s", at.UTC().Format(time.RFC3339Nano), stable, now.UTC().Format(time.RFC3339Nano))
	}
	return Kept, nil
}

// Record validates a stat and adds it to the target's windows at second at.
// at may lie in the past, within one stable window of now, so that a target
// can be rebuilt by replaying its history. A refused stat changes nothing and
// is reported with a DropReason and an error naming the field and value.
//
// poke reports whether the caller should run Poke now: an activator stat
// with non-zero concurrency arrived while the desired scale was exactly 0.
func (a *Autoscaler) Record(at, now time.Time, s Stat, src Source) (poke bool, reason DropReason, err error) {
	if reason, err := checkStat(at, now, &s, a.spec.MetricStableWindow); err != nil {
		return false, reason, err
	}
	a.record(at, s)
	// The poke tests the raw concurrency field, even for the RPS metric.
	poke = src == SourceActivator && a.status.DesiredScale == 0 && s.AverageConcurrentRequests != 0
	return poke, Kept, nil
}

// Change is a status change the reconciler must hear about.
type Change struct {
	Key    Key
	Status Status
}

// Set holds every target's state and is driven by the caller's single tick
// loop: no goroutine, ticker or timer per target. A Set is not safe for
// concurrent use: its owner serialises access, as decider/engine does under
// its own lock (a lock here too would be taken for every sample, and a
// locked instruction waits for the stores before it, which in a tick over
// many targets are cache misses).
type Set struct {
	byKey map[Key]*entry
	list  []*entry
}

type entry struct {
	// idx is the entry's place in list; -1 once deleted, so that a Ref
	// kept by a caller no longer reaches it. It is next to a's windows,
	// which a Record through a Ref touches next.
	idx  int
	a    Autoscaler
	key  Key
	last Decision
}

// Ref is a handle on one target of a Set, for a caller that records to the
// same target often: calls through it skip the key lookup (hashing the
// key's strings, probing the map), which costs more than recording itself.
// A Ref stays valid until its target is deleted; a target created again
// under the same key has a new Ref. The zero Ref reaches no target.
type Ref struct{ e *entry }

// Ref returns the handle of a target.
func (s *Set) Ref(key Key) (Ref, bool) {
	e, ok := s.byKey[key]
	return Ref{e}, ok
}

// entryOf returns the entry a Ref reaches, nil for the zero Ref or a
// deleted target.
func (r Ref) entryOf() *entry {
	if r.e == nil || r.e.idx < 0 {
		return nil
	}
	return r.e
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{byKey: make(map[Key]*entry)}
}

// Len returns the number of targets.
func (s *Set) Len() int {
	return len(s.list)
}

// Create adds a target created at now with ready pods ready (see New).
func (s *Set) Create(key Key, spec Spec, now time.Time, ready int32) error {
	if key.Namespace == "" || key.Name == "" {
		return fmt.Errorf("create %q: want a namespace and a name", key.String())
	}
	e := &entry{key: key}
	if err := e.a.init(spec, now, ready); err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	e.last = Decision{At: now, Invalid: NoData, Metric: spec.ScalingMetric, ReadyPods: ready}
	if _, ok := s.byKey[key]; ok {
		return fmt.Errorf("create %s: %w", key, ErrTargetExists)
	}
	e.idx = len(s.list)
	s.list = append(s.list, e)
	s.byKey[key] = e
	return nil
}

// Update replaces a target's spec, keeping its history, panic state and
// status (Knative's MultiScaler.Update).
func (s *Set) Update(key Key, spec Spec, now time.Time) error {
	e, ok := s.byKey[key]
	if !ok {
		return fmt.Errorf("update %s: %w", key, ErrUnknownTarget)
	}
	if err := e.a.Update(spec, now); err != nil {
		return fmt.Errorf("update %s: %w", key, err)
	}
	return nil
}

// Delete removes a target and reports whether it existed.
func (s *Set) Delete(key Key) bool {
	e, ok := s.byKey[key]
	if !ok {
		return false
	}
	last := len(s.list) - 1
	s.list[e.idx] = s.list[last]
	s.list[e.idx].idx = e.idx
	s.list[last] = nil
	s.list = s.list[:last]
	delete(s.byKey, key)
	e.idx = -1
	return true
}

// SetReady records the target's ready pod count, used by the next Tick or
// Poke. Negative counts are refused.
func (s *Set) SetReady(key Key, ready int32) error {
	if ready < 0 {
		return fmt.Errorf("ready pods of %s %d: want ≥ 0", key, ready)
	}
	e, ok := s.byKey[key]
	if !ok {
		return fmt.Errorf("ready pods of %s: %w", key, ErrUnknownTarget)
	}
	e.a.ready = ready
	return nil
}

// Record adds a stat to a target (see Autoscaler.Record). A refused stat is
// reported with its DropReason, for the caller's drop counter.
func (s *Set) Record(key Key, at, now time.Time, st Stat, src Source) (poke bool, reason DropReason, err error) {
	e, ok := s.byKey[key]
	if !ok {
		return false, DropUnknownTarget, fmt.Errorf("record %s: %w", key, ErrUnknownTarget)
	}
	poke, reason, err = e.a.Record(at, now, st, src)
	if err != nil {
		return false, reason, fmt.Errorf("record %s: %w", key, err)
	}
	return poke, reason, nil
}

// RecordRef is SetReady and then Record through a target's Ref, in one
// call: it sets the ready pod count when ready ≥ 0, then records the stat
// unless readyOnly. This is one sample of a caller that carries both; a
// stat refused by Record is reported as Record reports it, after the ready
// count was kept.
func (s *Set) RecordRef(r Ref, at, now time.Time, st Stat, src Source, ready int32, readyOnly bool) (poke bool, reason DropReason, err error) {
	e := r.entryOf()
	if e == nil {
		return false, DropUnknownTarget, fmt.Errorf("record: %w", ErrUnknownTarget)
	}
	if ready >= 0 {
		e.a.ready = ready
	}
	if !readyOnly {
		poke, reason, err = e.a.Record(at, now, st, src)
	}
	if err != nil {
		return false, reason, fmt.Errorf("record %s: %w", e.key, err)
	}
	return poke, reason, nil
}

// Poke runs one out-of-band decision for a target at now, as after an
// activator stat that Record flagged. It returns the decision and whether the
// reconciler must be told.
func (s *Set) Poke(key Key, now time.Time) (Decision, bool, error) {
	e, ok := s.byKey[key]
	if !ok {
		return Decision{}, false, fmt.Errorf("poke %s: %w", key, ErrUnknownTarget)
	}
	informed := e.a.scaleInto(now, e.a.ready, TriggerPoke, &e.last)
	return e.last, informed, nil
}

// TickOne makes the tick decision of one target at now, as Tick does for
// all, and reports whether the reconciler must hear about it: for a target
// whose samples came after its tick was made.
func (s *Set) TickOne(key Key, now time.Time) (bool, error) {
	e, ok := s.byKey[key]
	if !ok {
		return false, fmt.Errorf("tick %s: %w", key, ErrUnknownTarget)
	}
	return e.a.scaleInto(now, e.a.ready, TriggerTick, &e.last), nil
}

// Tick makes one decision for every target at now, with the ready counts
// last given to SetReady, and appends to changed the targets whose status
// the reconciler must hear about. Pass a reused buffer to avoid allocating.
func (s *Set) Tick(now time.Time, changed []Change) []Change {
	for _, e := range s.list {
		if e.a.scaleInto(now, e.a.ready, TriggerTick, &e.last) {
			changed = append(changed, Change{Key: e.key, Status: e.a.status})
		}
	}
	return changed
}

// Get returns a target's last decision and its status.
func (s *Set) Get(key Key) (Decision, Status, bool) {
	e, ok := s.byKey[key]
	if !ok {
		return Decision{}, Status{}, false
	}
	return e.last, e.a.status, true
}
