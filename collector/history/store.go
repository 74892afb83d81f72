package history

import (
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Store holds the retained samples and specs of all targets.
type Store struct {
	retention time.Duration

	// mu guards everything below.
	mu      sync.Mutex
	seq     uint64
	targets map[string]*entry
	// removed maps a forgotten target to the sequence of its removal, so
	// streams that knew it learn it is gone; streams starting later never do.
	removed map[string]removal
	// changed is closed and replaced on every change, to wake streams.
	changed chan struct{}
}

type entry struct {
	ref     *commonv1.TargetRef
	spec    *deciderv1.TargetSpec
	specSeq uint64
	samples []stored // oldest first
	errMsg  string
	errSeq  uint64
}

type stored struct {
	seq    uint64
	sample *commonv1.MetricSample
}

type removal struct {
	seq uint64
	ref *commonv1.TargetRef
}

// New returns a store keeping samples for retention behind each target's
// newest sample.
func New(retention time.Duration) *Store {
	return &Store{retention: retention, targets: map[string]*entry{}, removed: map[string]removal{}, changed: make(chan struct{})}
}

// Changed returns a channel closed at the next change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Store) bumpLocked() uint64 {
	s.seq++
	close(s.changed)
	s.changed = make(chan struct{})
	return s.seq
}

func (s *Store) entryLocked(ref *commonv1.TargetRef) *entry {
	key := ref.Key()
	e, ok := s.targets[key]
	if !ok {
		e = &entry{ref: proto.Clone(ref).(*commonv1.TargetRef)}
		s.targets[key] = e
		delete(s.removed, key)
	}
	return e
}

// SetSpec records a target's spec. An unchanged spec is not a change.
func (s *Store) SetSpec(spec *deciderv1.TargetSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(spec.GetTarget())
	if e.spec != nil && proto.Equal(e.spec, spec) {
		return
	}
	e.spec = proto.Clone(spec).(*deciderv1.TargetSpec)
	e.specSeq = s.bumpLocked()
}

// HasSpec reports whether the target has a spec.
func (s *Store) HasSpec(ref *commonv1.TargetRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.targets[ref.Key()]
	return ok && e.spec != nil
}

// Append records a sample for the target and drops samples older than the
// retention behind the newest one. The store keeps the sample; the caller
// must not change it afterwards.
func (s *Store) Append(ref *commonv1.TargetRef, sample *commonv1.MetricSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(ref)
	e.samples = append(e.samples, stored{seq: s.bumpLocked(), sample: sample})
	newest := sample.GetTime().AsTime()
	cut := 0
	for cut < len(e.samples) && newest.Sub(e.samples[cut].sample.GetTime().AsTime()) > s.retention {
		cut++
	}
	if cut > 0 {
		e.samples = append(e.samples[:0], e.samples[cut:]...)
	}
}

// SetError records (or, with "", clears) the target's measurement error.
func (s *Store) SetError(ref *commonv1.TargetRef, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(ref)
	if e.errMsg == msg {
		return
	}
	e.errMsg = msg
	e.errSeq = s.bumpLocked()
}

// Remove forgets a target.
func (s *Store) Remove(ref *commonv1.TargetRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := ref.Key()
	if _, ok := s.targets[key]; !ok {
		return
	}
	delete(s.targets, key)
	s.removed[key] = removal{seq: s.bumpLocked(), ref: proto.Clone(ref).(*commonv1.TargetRef)}
}

// Since returns the changes after cursor as one Ingest batch (without
// collector id) and the cursor to pass next time. A cursor of 0 yields the
// whole retained state. ok is false when nothing changed.
func (s *Store) Since(cursor uint64) (batch *deciderv1.IngestRequest, next uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq == cursor {
		return nil, cursor, false
	}
	batch = &deciderv1.IngestRequest{}
	keys := make([]string, 0, len(s.targets))
	for k := range s.targets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := s.targets[k]
		if e.spec != nil && e.specSeq > cursor {
			batch.Specs = append(batch.Specs, e.spec)
		}
		var tm *deciderv1.TargetMetrics
		// Samples are in sequence order, so the new ones are a suffix.
		i := sort.Search(len(e.samples), func(i int) bool { return e.samples[i].seq > cursor })
		if i < len(e.samples) || e.errSeq > cursor {
			tm = &deciderv1.TargetMetrics{Target: e.ref, MeasureError: e.errMsg}
			for _, st := range e.samples[i:] {
				tm.Samples = append(tm.Samples, st.sample)
			}
			batch.Metrics = append(batch.Metrics, tm)
		}
	}
	if cursor > 0 {
		for _, r := range s.removed {
			if r.seq > cursor {
				batch.Removed = append(batch.Removed, r.ref)
			}
		}
	}
	return batch, s.seq, true
}

// Window is what the store holds for one target.
type Window struct {
	Target  *commonv1.TargetRef
	Spec    *deciderv1.TargetSpec
	Samples []*commonv1.MetricSample
	Error   string
}

// Get returns a copy of what the store holds for the target.
func (s *Store) Get(ref *commonv1.TargetRef) (Window, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.targets[ref.Key()]
	if !ok {
		return Window{}, false
	}
	w := Window{Target: e.ref, Spec: e.spec, Error: e.errMsg, Samples: make([]*commonv1.MetricSample, len(e.samples))}
	for i, st := range e.samples {
		w.Samples[i] = st.sample
	}
	return w, true
}

// Targets returns every target's window, sorted by namespace and name.
func (s *Store) Targets() []Window {
	s.mu.Lock()
	refs := make([]*commonv1.TargetRef, 0, len(s.targets))
	for _, e := range s.targets {
		refs = append(refs, e.ref)
	}
	s.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool { return refs[i].Key() < refs[j].Key() })
	out := make([]Window, 0, len(refs))
	for _, r := range refs {
		if w, ok := s.Get(r); ok {
			out = append(out, w)
		}
	}
	return out
}

// Retention is how far behind the newest sample the store keeps samples.
func (s *Store) Retention() time.Duration { return s.retention }
