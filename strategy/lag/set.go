package lag

import (
	"fmt"
	"sync"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Result is the compact per-target output of Set.Tick.
type Result struct {
	Key         string
	Desired     int32
	ScaleNeeded bool
	Status      Status
}

// Observation is one tick of recorded history, for Rebuild.
type Observation struct {
	Time  time.Time
	Input Input
}

// Set holds every lag target of a decider and ticks them all from one loop:
// no goroutine, ticker or timer per target. It is safe for concurrent use;
// Tick holds the lock for the whole walk.
type Set struct {
	// mu guards index and targets.
	mu sync.Mutex
	// index maps a target key to its position in targets.
	index   map[string]int
	targets []*entry
	// lastTick is the previous Tick's time; half the shell's period is the
	// slack that decides which tick is closest to a target's due time.
	lastTick time.Time
}

type entry struct {
	key    string
	scaler *Scaler
	// in is the latest observation, with a partitions buffer owned by the
	// Set; fresh says it arrived since the last tick.
	in    Input
	fresh bool
	// next is when the target is due again (zero: at the next Tick). A
	// target is decided at its own TickInterval (riff 100 ms, KEDA 30 s),
	// at a fixed rate, on the shell tick closest to its due time.
	next time.Time
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{index: make(map[string]int)}
}

// Upsert adds a target or reconfigures an existing one (keeping its state as
// Scaler.Reconfigure does).
func (s *Set) Upsert(key string, cfg lagconfig.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[key]; ok {
		if err := s.targets[i].scaler.Reconfigure(cfg); err != nil {
			return fmt.Errorf("target %s: %w", key, err)
		}
		return nil
	}
	sc, err := New(cfg)
	if err != nil {
		return fmt.Errorf("target %s: %w", key, err)
	}
	s.index[key] = len(s.targets)
	s.targets = append(s.targets, &entry{key: key, scaler: sc})
	return nil
}

// Remove forgets a target; it reports whether it was known.
func (s *Set) Remove(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[key]
	if !ok {
		return false
	}
	last := len(s.targets) - 1
	s.targets[i] = s.targets[last]
	s.index[s.targets[i].key] = i
	s.targets[last] = nil
	s.targets = s.targets[:last]
	delete(s.index, key)
	return true
}

// Len returns the number of targets.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.targets)
}

// Observe records the collector's latest report for a target. The
// partitions are copied into a buffer the Set reuses, so steady-state
// observation does not allocate. A target not observed between two ticks
// gets a no-data decision (its previous decision held).
func (s *Set) Observe(key string, in Input) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[key]
	if !ok {
		return fmt.Errorf("observe %s: unknown lag target", key)
	}
	e := s.targets[i]
	buf := append(e.in.Partitions[:0], in.Partitions...)
	e.in = in
	e.in.Partitions = buf
	e.fresh = true
	return nil
}

// Tick decides every target that is due at now and appends one Result per
// decided target to out, which it returns; pass out[:0] from the previous
// tick to avoid allocating. The shell calls it from one loop at least as
// often as the shortest TickInterval (riff: 100 ms).
func (s *Set) Tick(now time.Time, out []Result) []Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	var slack time.Duration
	if !s.lastTick.IsZero() && now.After(s.lastTick) {
		slack = now.Sub(s.lastTick) / 2
	}
	s.lastTick = now
	for _, e := range s.targets {
		if !e.next.IsZero() && now.Add(slack).Before(e.next) {
			continue
		}
		interval := e.scaler.cfg.TickInterval
		if e.next.IsZero() || now.Sub(e.next) >= interval {
			e.next = now.Add(interval) // first tick, or fell behind: re-anchor
		} else {
			e.next = e.next.Add(interval)
		}
		var d Decision
		if e.fresh {
			d = e.scaler.Decide(&e.in, now)
			e.fresh = false
		} else {
			stale := Input{Replicas: e.in.Replicas, ReplicasKnown: e.in.ReplicasKnown}
			d = e.scaler.hold(e.scaler.stamp(&stale, now), StatusNoData, errNotObserved)
		}
		out = append(out, Result{Key: e.key, Desired: d.Desired, ScaleNeeded: d.ScaleNeeded, Status: d.Status})
	}
	return out
}

var errNotObserved = fmt.Errorf("%w: nothing observed since the last tick", ErrNoData)

// Explain returns a copy of a target's latest Decision.
func (s *Set) Explain(key string) (Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[key]
	if !ok {
		return Decision{}, false
	}
	return s.targets[i].scaler.Last().clone(), true
}

// Rebuild replaces a target's state by replaying recorded history, oldest
// first, through a fresh Scaler with the target's configuration. A decider
// that takes over a target calls it before the target's first tick.
func (s *Set) Rebuild(key string, history []Observation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[key]
	if !ok {
		return fmt.Errorf("rebuild %s: unknown lag target", key)
	}
	sc, err := Rebuild(s.targets[i].scaler.Config(), history)
	if err != nil {
		return fmt.Errorf("rebuild %s: %w", key, err)
	}
	s.targets[i].scaler = sc
	return nil
}

// Rebuild returns a Scaler whose state is the result of replaying history
// through a fresh Scaler for cfg. Times must not go backwards.
func Rebuild(cfg lagconfig.Config, history []Observation) (*Scaler, error) {
	sc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	for i := range history {
		if i > 0 && history[i].Time.Before(history[i-1].Time) {
			return nil, fmt.Errorf("history[%d]: time %s is before %s", i, history[i].Time, history[i-1].Time)
		}
		sc.Decide(&history[i].Input, history[i].Time)
	}
	return sc, nil
}

// stamp builds the fixed fields of a Decision for a held tick.
func (s *Scaler) stamp(in *Input, now time.Time) Decision {
	d := Decision{Mode: s.cfg.Mode, Faithful: s.cfg.Faithful, Time: now,
		ObservedReplicas: in.Replicas, ObservedKnown: in.ReplicasKnown && in.Replicas >= 0}
	d.ReplicasBefore = s.current
	return d
}
