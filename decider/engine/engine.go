package engine

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tidalscale/tidal/decider/keepalive"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
	"github.com/tidalscale/tidal/targetkey"
)

// Config is the engine's cluster-wide configuration.
type Config struct {
	// KPA and Deployment are the parsed config-autoscaler and
	// config-deployment maps every KPA target resolves its annotations against.
	KPA        kpaconfig.Config
	Deployment kpaconfig.DeploymentConfig
	// TickInterval is the KPA decision interval (Knative's 2 s).
	TickInterval time.Duration
	// Lateness is how long after a grid time the engine waits for samples
	// stamped at or before it before deciding it. A sample reaches the
	// decider some milliseconds after its time (the collector batches, the
	// network carries); without the wait a live tick would miss a sample a
	// decider rebuilt from history counts, and the two would decide apart.
	// It is the longest wait: once every open Source says its scrape
	// samples up to the grid time are in, the tick is made at once.
	Lateness time.Duration
	// Hold is how long KPA ticks wait for samples when every KPA
	// measurement stops coming at once, which is the pipeline stalling (a
	// starved collector, a stream backed up, this process paused), not
	// every workload going quiet: a tick made without them reads the gap
	// as idle, and at one stable window of silence Knative's average is 0
	// and the target is scaled towards zero. While the newest measurement
	// is more than a tick interval behind a due grid time, ticks wait for
	// it, at most Hold; then the ticks held are made in order with the
	// samples that came, as they would have been made on time. 0 disables.
	Hold time.Duration
	// OnDrop, when set, is called for every refused sample with a short
	// reason suitable for a metric label.
	OnDrop func(reason string)
	// MaxTargets bounds the targets the engine holds; a new target beyond
	// it is refused with ErrTooManyTargets. 0 means no bound.
	MaxTargets int
}

// ErrUnknownTarget is returned for a target the engine does not hold.
var ErrUnknownTarget = errors.New("unknown target")

// ErrTooManyTargets is returned for a new target when the engine holds
// Config.MaxTargets.
var ErrTooManyTargets = errors.New("the decider holds its most targets")

// Engine holds every target of one decider. It is safe for concurrent use.
type Engine struct {
	cfg Config
	kpa *kpa.Set
	lag *lag.Set

	// mu guards everything below and the kpa set, which has no lock of
	// its own; the lag set has one, and is only changed with mu held, so
	// the engine and a set never disagree on a target.
	mu      sync.Mutex
	targets map[tkey]*target
	// created counts the targets ever created, so a listing's index knows
	// when it misses one.
	created uint64
	// order holds the targets too, in creation order but for removals: a
	// tick walks it rather than the map, whose random order makes every
	// target a cache miss the prefetcher cannot see coming.
	order []*target
	// lagTargets are the lag targets by their lag.Set key, for the 100 ms
	// loop and the Set's results.
	lagTargets map[string]*target
	// kpaTargets are the KPA targets by their kpa.Set key, for the Set's
	// changes.
	kpaTargets map[kpa.Key]*target
	// lastKPA is the last KPA grid tick decided; zero before the first.
	lastKPA time.Time
	// newest is the time of the newest KPA measurement taken, and
	// newestSeen the caller's clock when it last moved on (Config.Hold).
	newest, newestSeen time.Time

	// sources are the open collectors' streams (Source); overSources
	// counts those opened beyond maxSources, which keep the ticks at
	// Config.Lateness while they are open.
	sources     map[*Source]struct{}
	overSources int
	// ready has a value once the sources are past the next KPA grid time
	// (Ready): the tick need not wait for the loop's next turn.
	ready chan struct{}

	changed []kpa.Change
	results []lag.Result
	// announce lists the targets whose next decision is reported even
	// when unchanged (target.announce).
	announce []*target
	// keepAlive lists the KPA targets with the predictive keep-alive
	// policy, which every KPA tick decides for after Knative's rules.
	keepAlive []*target
	// undecided lists the KPA targets that had no decision yet when last
	// looked at (target.undecided), for lateFirstLocked.
	undecided []*target
}

// tkey is a target's identity (targetkey) as a map key; unlike Target.Key
// it costs no allocation to build, which matters once per sample.
type tkey struct{ ns, name, group, kind string }

func keyOf(t Target) tkey {
	group, kind := targetkey.GroupKind(t.APIVersion, t.Kind)
	return tkey{t.Namespace, t.Name, group, kind}
}

type target struct {
	ref Target
	// key is ref.Key(), built once: the lag.Set's key; kkey is the
	// kpa.Set's, built once too, as both are used once per sample.
	key  string
	kkey kpa.Key
	// pos is the target's index in Engine.order.
	pos int
	// kref is the kpa.Set's handle on the target while it holds it: a
	// sample applied through it costs no key lookup.
	kref     kpa.Ref
	spec     Spec
	strategy Strategy
	specErr  error
	// inSet is true once the target's strategy set holds it.
	inSet bool
	// undecided is set while a KPA target has had no valid decision: its
	// first samples, if they come after the tick they belong to was made,
	// are decided at that tick at once (lateFirstLocked).
	undecided bool
	// announce is set when the target was rebuilt from replayed history:
	// its state already holds the decision it replayed to, so the next
	// tick would not find a change to report, and the actuator must still
	// hear it (from this decider, it never did).
	announce bool
	// maxScale is a KPA target's max-scale; 0 means unbounded.
	maxScale int32
	// ready is the last known ready pod count, -1 when unknown.
	ready int32
	// pending holds samples stamped after the last tick, in arrival order.
	pending []Sample
	// lagDesired is the desired scale of the latest lag tick.
	lagDesired int32
	// measureErr is the collector's error for the target, from an error
	// sample until a good sample ends it; empty when measured.
	measureErr string
	// lagIn is a lag target's latest good observation, taken at lagAt;
	// lagEvery is the target's decision interval.
	lagIn    lag.Input
	lagAt    time.Time
	lagEvery time.Duration
	// ka is the predictive keep-alive policy's memory of a KPA target that
	// uses it, nil otherwise; kaDec its latest decision and kaSent what of
	// it was last reported.
	ka     *keepalive.State
	kaDec  keepalive.Decision
	kaSent reported
}

// reported is what a keep-alive target's last reported decision said: a
// decision is reported when any of it changes.
type reported struct {
	desired    int32
	predicted  bool
	ebcNegativ bool
	valid      bool
}

// New returns an empty engine.
func New(cfg Config) *Engine {
	if cfg.OnDrop == nil {
		cfg.OnDrop = func(string) {}
	}
	return &Engine{cfg: cfg, kpa: kpa.NewSet(), lag: lag.NewSet(), targets: map[tkey]*target{}, lagTargets: map[string]*target{}, kpaTargets: map[kpa.Key]*target{},
		sources: map[*Source]struct{}{}, ready: make(chan struct{}, 1)}
}

// maxSources bounds the streams whose progress the engine follows: a
// decider has one per collector replica.
const maxSources = 1024

// Source is one collector stream's word on how far its scrape samples have
// come: every one stamped before its time has been recorded. A KPA tick is
// made as soon as every open source is past its grid time, rather than
// Config.Lateness after it; a source that has said nothing yet keeps the
// ticks at Lateness, as do samples that come with no source at all.
type Source struct {
	e      *Engine
	before time.Time
	// counted is set for one of Engine.sources, not of overSources;
	// closed once Close was called.
	counted, closed bool
}

// OpenSource starts following a stream; Close it when the stream ends.
func (e *Engine) OpenSource() *Source {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &Source{e: e}
	if len(e.sources) >= maxSources {
		e.overSources++
		return s
	}
	s.counted = true
	e.sources[s] = struct{}{}
	return s
}

// CompleteBefore records that every scrape sample of the stream stamped
// before t has been recorded. Call it after recording the batch that said so.
func (s *Source) CompleteBefore(t time.Time) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if !t.After(s.before) {
		return
	}
	s.before = t
	if last := s.e.lastKPA; !last.IsZero() && s.e.completeLocked().After(gridAfter(last, s.e.cfg.TickInterval)) {
		select {
		case s.e.ready <- struct{}{}:
		default: // already told
		}
	}
}

// Ready has a value once every open Source is past the next KPA grid time,
// so TickKPA can make that tick at once.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Close stops following the stream.
func (s *Source) Close() {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	switch {
	case s.closed:
	case s.counted:
		delete(s.e.sources, s)
	default:
		s.e.overSources--
	}
	s.closed = true
}

// completeLocked returns the time before which every open source's scrape
// samples have been recorded; zero when a source has said nothing or there
// is none.
func (e *Engine) completeLocked() time.Time {
	if len(e.sources) == 0 || e.overSources > 0 {
		return time.Time{}
	}
	var c time.Time
	for s := range e.sources {
		if s.before.IsZero() {
			return time.Time{}
		}
		if c.IsZero() || s.before.Before(c) {
			c = s.before
		}
	}
	return c
}

// Len returns the number of targets.
func (e *Engine) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.targets)
}

func kpaKey(t Target) kpa.Key {
	return kpa.Key{Namespace: t.Namespace, Name: t.Name, Kind: targetkey.Qualifier(t.APIVersion, t.Kind)}
}

// Upsert adds a target or changes its spec. A spec that does not parse is
// refused with an error naming the key and value; the target is kept with
// that error (visible in its decision) and not decided for until a good
// spec arrives.
func (e *Engine) Upsert(spec Spec, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(spec.Target)]
	if !ok {
		if e.cfg.MaxTargets > 0 && len(e.targets) >= e.cfg.MaxTargets {
			return fmt.Errorf("target %s: %w (%d)", spec.Target.Key(), ErrTooManyTargets, e.cfg.MaxTargets)
		}
		t = &target{ref: spec.Target, key: spec.Target.Key(), kkey: kpaKey(spec.Target), ready: -1, pos: len(e.order)}
		e.targets[keyOf(spec.Target)] = t
		e.order = append(e.order, t)
		e.created++
	}
	if t.inSet && t.strategy != spec.Strategy {
		e.removeFromSetLocked(t)
	}
	t.spec, t.strategy = spec, spec.Strategy
	t.specErr = e.applySpecLocked(t, now)
	if t.specErr != nil {
		return fmt.Errorf("target %s: %w", t.key, t.specErr)
	}
	return nil
}

// SetKPAConfig makes kcfg and dep the cluster-wide configuration every KPA
// target resolves its annotations against (a Knative operator's edit of
// config-autoscaler or config-deployment), and resolves every KPA target
// again at now, keeping its history. A target whose annotations no longer
// resolve keeps deciding on its last good spec with the error shown, as
// after a bad Upsert. It reports whether the configuration changed and how
// many targets were refused.
func (e *Engine) SetKPAConfig(kcfg kpaconfig.Config, dep kpaconfig.DeploymentConfig, now time.Time) (changed bool, refused int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cfg.KPA == kcfg && e.cfg.Deployment == dep {
		return false, 0
	}
	e.cfg.KPA, e.cfg.Deployment = kcfg, dep
	for _, t := range e.order {
		if t.strategy != KPA {
			continue
		}
		if t.specErr = e.applySpecLocked(t, now); t.specErr != nil {
			refused++
		}
	}
	return true, refused
}

// EachKnative calls f with the latest decision of every KPA target that is
// a Knative Revision, holding the engine's lock: f must be quick (it
// exports metrics) and must not call the engine.
func (e *Engine) EachKnative(f func(Decision, *KnativeRevision)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.order {
		if t.strategy == KPA && t.inSet && t.spec.Knative != nil {
			f(e.kpaDecisionLocked(t, true), t.spec.Knative)
		}
	}
}

// KPAConfig returns the configuration KPA targets resolve against.
func (e *Engine) KPAConfig() (kpaconfig.Config, kpaconfig.DeploymentConfig) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.KPA, e.cfg.Deployment
}

func (e *Engine) applySpecLocked(t *target, now time.Time) error {
	switch t.strategy {
	case KPA:
		rev, err := kpaconfig.NewRevision(e.cfg.KPA, e.cfg.Deployment, t.spec.Annotations, int64(t.spec.ContainerConcurrency), t.spec.Reachable)
		if err != nil {
			return err
		}
		s := rev.DeciderSpec()
		_, t.maxScale = rev.ScaleBounds()
		if t.inSet {
			if err := e.kpa.Update(t.kkey, s, now); err != nil {
				return err
			}
		} else {
			if err := e.kpa.Create(t.kkey, s, now, max(t.ready, 0)); err != nil {
				return err
			}
			t.kref, _ = e.kpa.Ref(t.kkey)
			e.kpaTargets[t.kkey] = t
			if !t.undecided {
				t.undecided = true
				e.undecided = append(e.undecided, t)
			}
		}
		e.keepAliveLocked(t, rev.Predictive(), now)
	case Lag:
		cfg, err := lagconfig.FromAnnotations(t.spec.Annotations)
		if err != nil {
			return err
		}
		if err := e.lag.Upsert(t.key, cfg); err != nil {
			return err
		}
		e.lagTargets[t.key] = t
		t.lagEvery = cfg.TickInterval
	default:
		return fmt.Errorf("strategy %d: want kpa or lag", t.strategy)
	}
	t.inSet = true
	return nil
}

// keepAliveLocked starts, keeps or ends a KPA target's keep-alive policy.
// A new policy starts from the memory the spec carries; a running one takes
// it only when it saw a request later (another decider held the target
// meanwhile): the echo of the memory this engine had written is older.
func (e *Engine) keepAliveLocked(t *target, predictive bool, now time.Time) {
	if !predictive {
		if t.ka != nil {
			t.ka = nil
			e.keepAlive = slices.DeleteFunc(e.keepAlive, func(o *target) bool { return o == t })
		}
		return
	}
	stored, err := keepalive.Decode(t.spec.KeepAliveState)
	if err != nil {
		// A state that does not decode is someone else's writing: start
		// afresh rather than refuse the target.
		e.cfg.OnDrop("bad_keep_alive_state")
	}
	switch {
	case t.ka == nil:
		t.ka = &stored
		e.keepAlive = append(e.keepAlive, t)
		t.kaSent = reported{}
	case t.ka.Newer(&stored):
		*t.ka = stored
	default:
		return
	}
	kd, st, _ := e.kpa.Get(t.kkey)
	t.kaDec = t.ka.Decide(later(kd.At, now), st.DesiredScale)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (e *Engine) kpaSpec(spec Spec) (kpa.Spec, error) {
	rev, err := kpaconfig.NewRevision(e.cfg.KPA, e.cfg.Deployment, spec.Annotations, int64(spec.ContainerConcurrency), spec.Reachable)
	if err != nil {
		return kpa.Spec{}, err
	}
	return rev.DeciderSpec(), nil
}

func (e *Engine) removeFromSetLocked(t *target) {
	switch t.strategy {
	case KPA:
		e.kpa.Delete(t.kkey)
		t.kref = kpa.Ref{}
		delete(e.kpaTargets, t.kkey)
		e.keepAliveLocked(t, false, time.Time{})
	case Lag:
		e.lag.Remove(t.key)
		delete(e.lagTargets, t.key)
	}
	t.inSet = false
}

// Remove forgets a target; it reports whether the engine held it.
func (e *Engine) Remove(ref Target) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok {
		return false
	}
	e.removeFromSetLocked(t)
	delete(e.targets, keyOf(ref))
	last := len(e.order) - 1
	e.order[t.pos] = e.order[last]
	e.order[t.pos].pos = t.pos
	e.order[last] = nil
	e.order = e.order[:last]
	return true
}

// Record takes a live sample. Samples wait for the tick at or after their
// time, except activator stats of KPA targets, which are recorded at once
// because they may poke: poke reports that the caller should call Poke now.
// A refused sample is reported to OnDrop and returned as an error.
func (e *Engine) Record(ref Target, s Sample, now time.Time) (poke bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok {
		e.cfg.OnDrop("unknown_target")
		return false, fmt.Errorf("record %s: %w", ref.Key(), ErrUnknownTarget)
	}
	if s.At.After(now.Add(kpa.MaxFutureSkew)) {
		// Held back for its tick, it would wait until that far-off time.
		e.cfg.OnDrop(kpa.DropFuture.String())
		return false, fmt.Errorf("record %s: sample time %s is more than %v after now %s",
			ref.Key(), s.At.UTC().Format(time.RFC3339Nano), kpa.MaxFutureSkew, now.UTC().Format(time.RFC3339Nano))
	}
	if t.strategy == KPA {
		e.noteLocked(&s, now)
	}
	if t.strategy == KPA && s.MeasureError != "" {
		// A failed scrape is the absence of data, which the windows
		// already express; it is never recorded as a zero, only kept to
		// explain the decision.
		t.measureErr = s.MeasureError
		return false, nil
	}
	if t.strategy == KPA && s.Activator && t.inSet {
		poke, err := e.recordKPALocked(t, &s, now)
		// Knative pokes when its own desired scale is 0; a target the
		// keep-alive policy holds at zero must be poked too, whatever
		// Knative's number.
		if t.ka != nil && err == nil && t.kaSent.valid && t.kaSent.desired == 0 && s.Stat.AverageConcurrentRequests != 0 {
			poke = true
		}
		return poke, err
	}
	t.pending = append(t.pending, s)
	return false, nil
}

// noteLocked moves the newest KPA measurement's time on (Config.Hold).
func (e *Engine) noteLocked(s *Sample, now time.Time) {
	if !s.ReadyOnly && s.MeasureError == "" && s.At.After(e.newest) {
		e.newest, e.newestSeen = s.At, now
	}
}

func (e *Engine) recordKPALocked(t *target, s *Sample, now time.Time) (bool, error) {
	if s.ReadyPods >= 0 {
		t.ready = s.ReadyPods
	}
	src := kpa.SourceScraper
	if s.Activator {
		src = kpa.SourceActivator
	}
	poke, reason, err := e.kpa.RecordRef(t.kref, s.At, now, s.Stat, src, s.ReadyPods, s.ReadyOnly)
	if err != nil {
		e.cfg.OnDrop(reason.String())
		return poke, err
	}
	if t.ka != nil && !s.ReadyOnly && (s.Stat.AverageConcurrentRequests > 0 || s.Stat.RequestCount > 0) {
		t.ka.Observe(s.At)
	}
	return poke, nil
}

// SetReady records a target's ready pod count as of now, for counts that
// come without a sample (a target whose last pod went has nothing to scrape).
func (e *Engine) SetReady(ref Target, ready int32) error {
	if ready < 0 {
		return fmt.Errorf("ready pods of %s %d: want at least 0", ref.Key(), ready)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok {
		return fmt.Errorf("ready pods of %s: %w", ref.Key(), ErrUnknownTarget)
	}
	t.ready = ready
	if t.strategy == KPA && t.inSet {
		return e.kpa.SetReady(t.kkey, ready)
	}
	return nil
}

// Poke makes an out-of-band KPA decision for the target at now, as Knative
// does when an activator stat arrives while the desired scale is 0.
func (e *Engine) Poke(ref Target, now time.Time) (Decision, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok || t.strategy != KPA || !t.inSet {
		return Decision{}, false, fmt.Errorf("poke %s: %w", ref.Key(), ErrUnknownTarget)
	}
	_, informed, err := e.kpa.Poke(t.kkey, now)
	if err != nil {
		return Decision{}, false, err
	}
	if t.ka != nil {
		informed = e.decideKeepAliveLocked(t, now)
	}
	return e.kpaDecisionLocked(t, true), informed, nil
}

// decideKeepAliveLocked applies the keep-alive policy to Knative's latest
// status at now and reports whether the decision must be reported: its
// number, its prediction or the sign of the excess burst capacity changed.
func (e *Engine) decideKeepAliveLocked(t *target, now time.Time) bool {
	_, st, _ := e.kpa.Get(t.kkey)
	t.kaDec = t.ka.Decide(now, st.DesiredScale)
	if t.kaDec.Desired < 0 {
		return false
	}
	r := reported{desired: t.kaDec.Desired, predicted: t.kaDec.Predicted, ebcNegativ: st.ExcessBurstCapacity < 0, valid: true}
	if r == t.kaSent {
		return false
	}
	t.kaSent = r
	return true
}

// flushLocked records a target's pending samples stamped at or before at,
// oldest first, and keeps the rest waiting. It returns how many of them were
// measurements (not ready-count changes).
func (e *Engine) flushLocked(t *target, at time.Time) (applied int) {
	if len(t.pending) == 0 {
		return 0
	}
	if byTime := func(a, b Sample) int { return a.At.Compare(b.At) }; !slices.IsSortedFunc(t.pending, byTime) {
		slices.SortStableFunc(t.pending, byTime)
	}
	n := 0
	for n < len(t.pending) && !t.pending[n].At.After(at) {
		n++
	}
	if !t.inSet {
		// A target without a good spec cannot use its samples; they are
		// not data until the spec is fixed.
		for range t.pending[:n] {
			e.cfg.OnDrop("bad_spec")
		}
	} else {
		for i := range t.pending[:n] {
			if e.applySampleLocked(t, &t.pending[i], at) {
				applied++
			}
		}
	}
	rest := copy(t.pending, t.pending[n:])
	clear(t.pending[rest:])
	t.pending = t.pending[:rest]
	return applied
}

// applySampleLocked applies one due sample and reports whether it was a
// measurement.
func (e *Engine) applySampleLocked(t *target, s *Sample, now time.Time) bool {
	switch t.strategy {
	case KPA:
		if !s.ReadyOnly {
			t.measureErr = ""
		}
		_, _ = e.recordKPALocked(t, s, now) // refusals are counted through OnDrop
	case Lag:
		if s.ReadyPods >= 0 {
			t.ready = s.ReadyPods
		}
		if s.ReadyOnly {
			return false
		}
		t.measureErr = s.MeasureError
		in := lag.Input{
			Partitions:     s.Partitions,
			PartitionCount: s.PartitionCount,
			FetchFailed:    s.MeasureError != "",
			Replicas:       max(t.ready, 0),
			ReplicasKnown:  t.ready >= 0,
		}
		if err := e.lag.Observe(t.key, in); err != nil {
			e.cfg.OnDrop("bad_lag_input")
			return true
		}
		if s.MeasureError == "" {
			t.lagIn, t.lagAt = in, s.At
		}
	}
	return !s.ReadyOnly
}

// lagFreshness is how many of a lag target's intervals its latest sample
// stands for when no newer one came; older, the target has no data.
const lagFreshness = 2

// gridAfter returns the first multiple of interval in Unix time strictly after t.
func gridAfter(t time.Time, interval time.Duration) time.Time {
	return t.Truncate(interval).Add(interval)
}

// Tick decides every target that is due at now and returns the decisions the
// actuator must hear about: KPA targets whose desired scale (or the sign of
// their excess burst capacity) changed, and lag targets whose scale must be
// applied. KPA ticks fall on the Unix-aligned TickInterval grid; a tick at
// grid time g is made once now reaches g + Lateness, or g once every open
// Source is past g, and sees exactly the samples stamped at or before g;
// while KPA samples have stopped coming, later (Config.Hold). After a
// pause of more than a few ticks beyond the hold the missed ticks are
// skipped, not replayed.
func (e *Engine) Tick(now time.Time) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.tickKPALocked(now)
	for _, t := range e.lagTargets {
		if e.flushLocked(t, now) > 0 || !t.inSet {
			continue
		}
		switch {
		case t.measureErr != "":
			// The collector reports an error once, when it begins; until a
			// good sample ends it, every tick is a failed fetch, not a
			// tick with nothing observed.
			_ = e.lag.Observe(t.key, lag.Input{FetchFailed: true, Replicas: max(t.ready, 0), ReplicasKnown: t.ready >= 0})
		case !t.lagAt.IsZero() && now.Sub(t.lagAt) <= lagFreshness*t.lagEvery:
			// The collector measures at the target's interval but not in
			// phase with this loop: a tick that falls between two of its
			// samples decides on the latest one, while it is fresh, rather
			// than holding for "no data".
			in := t.lagIn
			in.Replicas, in.ReplicasKnown = max(t.ready, 0), t.ready >= 0
			_ = e.lag.Observe(t.key, in)
		}
	}
	e.results = e.lag.Tick(now, e.results[:0])
	for _, r := range e.results {
		t, ok := e.lagTargets[r.Key]
		if !ok {
			continue
		}
		// The full decision (a copy of every partition's figures and a
		// formatted reason) is built only when it is reported: most ticks
		// change nothing, and building it for every target every tick was
		// a sixth of the decider's CPU at 1,000 lag targets.
		prev := t.lagDesired
		t.lagDesired = r.Desired
		if r.ScaleNeeded || (r.Desired != prev && r.Desired >= 0) || t.announce {
			t.announce = false
			out = append(out, e.lagDecisionLocked(t, true))
		}
	}
	return e.announceLocked(out)
}

// TickKPA is Tick for the KPA targets alone, for a turn Ready asked for:
// the lag targets keep the loop's own pace.
func (e *Engine) TickKPA(now time.Time) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.announceLocked(e.tickKPALocked(now))
}

// tickKPALocked makes the KPA ticks due at now (Tick).
func (e *Engine) tickKPALocked(now time.Time) []Decision {
	var out []Decision
	iv := e.cfg.TickInterval
	due := now.Add(-e.cfg.Lateness)
	if c := e.completeLocked(); c.After(due) {
		// A grid time g is complete only when g < c; never one ahead of now.
		due = c.Add(-time.Nanosecond)
		if due.After(now) {
			due = now
		}
	}
	due = e.heldLocked(due, now) // grid times up to due have all their samples
	next := gridAfter(e.lastKPA, iv)
	if e.lastKPA.IsZero() || due.Sub(next) > 5*iv+e.cfg.Hold {
		next = due.Truncate(iv)
	}
	for !next.After(due) {
		for _, t := range e.order {
			if t.strategy == KPA {
				e.flushLocked(t, next)
			}
		}
		e.changed = e.kpa.Tick(next, e.changed[:0])
		for _, c := range e.changed {
			t, ok := e.kpaTargets[c.Key]
			if !ok {
				continue
			}
			t.undecided = false
			if t.ka == nil {
				t.announce = false
				out = append(out, e.kpaDecisionLocked(t, true))
			}
		}
		// Keep-alive targets are decided every tick, whether Knative's
		// number changed or not: time alone moves them to the pre-warm.
		for _, t := range e.keepAlive {
			if e.decideKeepAliveLocked(t, next) {
				t.announce = false
				out = append(out, e.kpaDecisionLocked(t, true))
			}
		}
		e.lastKPA = next
		next = next.Add(iv)
	}
	return e.lateFirstLocked(out)
}

// heldLocked returns the latest grid time KPA ticks may be made up to at
// now: due, or while the newest KPA measurement is more than a tick interval
// behind it, that measurement's time plus an interval, held for at most
// Config.Hold since it came and never more than Hold behind due (so that
// no caller's timestamps delay decisions further). A target whose samples
// are in step with the newest is then never a whole window behind at a
// tick: its trailing gap holds its average, as Knative's window does for a
// gap shorter than the window.
func (e *Engine) heldLocked(due, now time.Time) time.Time {
	if e.cfg.Hold <= 0 || e.newest.IsZero() || now.Sub(e.newestSeen) >= e.cfg.Hold {
		return due
	}
	limit := e.newest.Add(e.cfg.TickInterval)
	if !limit.Before(due) {
		return due
	}
	return later(limit, due.Add(-e.cfg.Hold))
}

// Behind returns how far the KPA ticks are behind the grid time due at
// now: more than a tick interval while samples have stopped coming (Config.Hold).
func (e *Engine) Behind(now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastKPA.IsZero() {
		return 0
	}
	return max(now.Add(-e.cfg.Lateness).Sub(e.lastKPA), 0)
}

// lateFirstLocked decides at the last tick made the KPA targets without a
// decision whose samples for that tick came after it was made, and appends
// the decisions to report: a new target's first samples are often late
// (its first scrape waits for the collector's next round), and would
// otherwise wait a whole tick more. The decision is the one that tick would
// have made had they come in time; it reports nothing when the target has
// no data still.
func (e *Engine) lateFirstLocked(out []Decision) []Decision {
	if len(e.undecided) == 0 || e.lastKPA.IsZero() {
		return out
	}
	keep := e.undecided[:0]
	for _, t := range e.undecided {
		if !t.undecided || !t.inSet || t.strategy != KPA {
			t.undecided = false
			continue
		}
		if !slices.ContainsFunc(t.pending, func(s Sample) bool { return !s.At.After(e.lastKPA) }) {
			keep = append(keep, t)
			continue
		}
		e.flushLocked(t, e.lastKPA)
		informed, err := e.kpa.TickOne(t.kkey, e.lastKPA)
		if err != nil {
			keep = append(keep, t)
			continue
		}
		if kd, _, _ := e.kpa.Get(t.kkey); !kd.Valid() {
			keep = append(keep, t)
			continue
		}
		t.undecided = false
		switch {
		case t.ka != nil:
			if e.decideKeepAliveLocked(t, e.lastKPA) {
				t.announce = false
				out = append(out, e.kpaDecisionLocked(t, true))
			}
		case informed:
			t.announce = false
			out = append(out, e.kpaDecisionLocked(t, true))
		}
	}
	clear(e.undecided[len(keep):])
	e.undecided = keep
	return out
}

// announceLocked appends the decisions of rebuilt targets not reported yet,
// once they have one.
func (e *Engine) announceLocked(out []Decision) []Decision {
	keep := e.announce[:0]
	for _, t := range e.announce {
		if !t.announce || !t.inSet {
			continue
		}
		if t.strategy != KPA {
			keep = append(keep, t) // the lag loop reports it with its next result
			continue
		}
		d := e.kpaDecisionLocked(t, true)
		if !d.Valid() {
			keep = append(keep, t) // no decision yet: wait for one
			continue
		}
		t.announce = false
		out = append(out, d)
	}
	clear(e.announce[len(keep):])
	e.announce = keep
	return out
}

// Replay rebuilds a target from replayed history, replacing what the engine
// held for it: its strategy restarts at the oldest sample and is ticked on
// the same grid as live targets up to the last tick already made, so its
// state ends where a decider that saw the samples live would have it.
// Samples after that tick wait for the next one.
func (e *Engine) Replay(ref Target, samples []Sample, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok {
		return fmt.Errorf("replay %s: %w", ref.Key(), ErrUnknownTarget)
	}
	if t.specErr != nil {
		return fmt.Errorf("replay %s: %w", ref.Key(), t.specErr)
	}
	sorted := append([]Sample(nil), samples...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
	t.pending = t.pending[:0]
	if !t.announce {
		t.announce = true
		e.announce = append(e.announce, t)
	}
	switch t.strategy {
	case KPA:
		return e.replayKPALocked(t, sorted, now)
	case Lag:
		return e.replayLagLocked(t, sorted, now)
	}
	return nil
}

func (e *Engine) replayKPALocked(t *target, samples []Sample, now time.Time) error {
	key := t.kkey
	s, err := e.kpaSpec(t.spec)
	if err != nil {
		return err
	}
	e.kpa.Delete(key)
	t.inSet = false
	start := now
	if len(samples) > 0 {
		start = samples[0].At
	}
	// Created as a live target is, before its ready count is known (so
	// never in Knative's restart panic, which would hold the first sample's
	// pod count for a stable window); the samples bring the count.
	if err := e.kpa.Create(key, s, start, 0); err != nil {
		return err
	}
	t.kref, _ = e.kpa.Ref(key)
	e.kpaTargets[key] = t
	t.ready = 0
	for _, smp := range samples {
		if smp.ReadyPods >= 0 {
			t.ready = smp.ReadyPods
			if err := e.kpa.SetReady(key, t.ready); err != nil {
				return err
			}
			break
		}
	}
	t.inSet = true
	for i := range samples {
		e.noteLocked(&samples[i], now)
	}
	last := e.lastKPA
	if last.IsZero() {
		last = now.Add(-e.cfg.Lateness).Truncate(e.cfg.TickInterval)
	}
	i := 0
	for g := gridAfter(start, e.cfg.TickInterval); !g.After(last); g = g.Add(e.cfg.TickInterval) {
		for ; i < len(samples) && !samples[i].At.After(g); i++ {
			_, _ = e.recordKPALocked(t, &samples[i], g)
		}
		if _, _, err := e.kpa.Poke(key, g); err != nil {
			return err
		}
	}
	t.pending = append(t.pending, samples[i:]...)
	return nil
}

func (e *Engine) replayLagLocked(t *target, samples []Sample, now time.Time) error {
	history := make([]lag.Observation, 0, len(samples))
	for _, s := range samples {
		if s.At.After(now) {
			t.pending = append(t.pending, s)
			continue
		}
		if s.ReadyPods >= 0 {
			t.ready = s.ReadyPods
		}
		if s.ReadyOnly {
			continue
		}
		history = append(history, lag.Observation{Time: s.At, Input: lag.Input{
			Partitions:     s.Partitions,
			PartitionCount: s.PartitionCount,
			FetchFailed:    s.MeasureError != "",
			Replicas:       max(t.ready, 0),
			ReplicasKnown:  t.ready >= 0,
		}})
	}
	return e.lag.Rebuild(t.key, history)
}

// Has reports whether the engine holds a target.
func (e *Engine) Has(ref Target) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.targets[keyOf(ref)]
	return ok
}

// Get returns a target's latest decision.
func (e *Engine) Get(ref Target) (Decision, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok {
		return Decision{}, false
	}
	return e.decisionLocked(t, true), true
}

// List returns every target's latest decision, sorted by namespace and
// name; an empty namespace means all.
func (e *Engine) List(namespace string) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Decision, 0, len(e.targets))
	for _, t := range e.targets {
		if namespace == "" || t.ref.Namespace == namespace {
			out = append(out, e.decisionLocked(t, true))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.Key() < out[j].Target.Key() })
	return out
}

// decisionLocked is t's latest decision; without full, only what a
// listing shows (no KPA, Lag, KeepAlive or KeepAliveState), which saves a
// listing of every target their copies.
func (e *Engine) decisionLocked(t *target, full bool) Decision {
	var d Decision
	switch {
	case !t.inSet:
		d = Decision{Target: t.ref, Strategy: t.strategy, Desired: kpa.ScaleUnknown}
	case t.strategy == KPA:
		d = e.kpaDecisionLocked(t, full)
	default:
		d = e.lagDecisionLocked(t, full)
	}
	d.MeasureError = t.measureErr
	if t.specErr != nil {
		d.SpecError = t.specErr.Error()
		d.Reason = "spec refused: " + d.SpecError
	}
	return d
}

func (e *Engine) kpaDecisionLocked(t *target, full bool) Decision {
	kd, st, _ := e.kpa.Get(t.kkey)
	d := Decision{
		Target:              t.ref,
		Strategy:            KPA,
		At:                  kd.At,
		Desired:             st.DesiredScale,
		Reason:              kd.Reason(),
		Panicking:           kd.Panicking,
		ExcessBurstCapacity: st.ExcessBurstCapacity,
		MaxScale:            t.maxScale,
		Advisory:            t.spec.Advisory,
	}
	if full {
		kd := kd // its own copy, so a listing's kd stays on the stack
		d.KPA = &kd
	}
	if t.ka != nil {
		kad := t.kaDec
		if full {
			kac := kad
			d.KeepAlive = &kac
			d.KeepAliveState = t.ka.Encode()
		}
		d.Desired = kad.Desired
		d.At = later(d.At, kad.At)
		switch kad.Phase {
		case keepalive.PhaseUnknown, keepalive.PhaseBusy:
		case keepalive.PhaseFallback:
			d.Reason += "; " + kad.Reason()
		default:
			d.Reason = kad.Reason()
		}
	}
	if !d.At.IsZero() {
		d.Sequence = uint64(d.At.UnixMilli())
	}
	return d
}

// NextKeepAlive is when a target's keep-alive decision changes with time
// alone (the end of a busy period, a pre-warm, the end of a warm window);
// false when nothing is due or the target has no keep-alive policy. A
// replay that skips idle time must not skip past it.
func (e *Engine) NextKeepAlive(ref Target) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.targets[keyOf(ref)]
	if !ok || t.ka == nil {
		return time.Time{}, false
	}
	next := t.kaDec.Next()
	return next, !next.IsZero()
}

func (e *Engine) lagDecisionLocked(t *target, full bool) Decision {
	ld, _ := e.lag.Explain(t.key)
	d := Decision{
		Target:   t.ref,
		Strategy: Lag,
		At:       ld.Time,
		Desired:  ld.Desired,
		Reason:   ld.Summary(),
		Advisory: t.spec.Advisory,
	}
	if full {
		ld := ld
		d.Lag = &ld
	}
	if !ld.Time.IsZero() {
		d.Sequence = uint64(ld.Time.UnixMilli())
	} else {
		d.Desired = kpa.ScaleUnknown
	}
	return d
}
