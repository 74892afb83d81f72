package dispatch

import (
	"cmp"
	"container/list"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/history"
	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/shard/route"
	"github.com/tidalscale/tidal/targetkey"
)

// tkey is a target's identity (targetkey) without building its string: the
// hub looks targets up once per pushed stat.
type tkey struct{ ns, name, group, kind string }

func keyOf(ref *commonv1.TargetRef) tkey {
	group, kind := targetkey.GroupKind(ref.GetApiVersion(), ref.GetKind())
	return tkey{ref.GetNamespace(), ref.GetName(), group, kind}
}

func (k tkey) String() string { return targetkey.OfGroupKind(k.ns, k.name, k.group, k.kind) }

func (k tkey) compare(o tkey) int {
	return cmp.Or(strings.Compare(k.ns, o.ns), strings.Compare(k.name, o.name), strings.Compare(k.group, o.group), strings.Compare(k.kind, o.kind))
}

// maxFailures is how many recent failures a target keeps for GetWindow.
const maxFailures = 16

// Failure is one failed measurement, for GetWindow.
type Failure struct {
	Time time.Time
	// Pod is empty when the whole scrape failed.
	Pod     string
	Reason  string
	Message string
}

// Hub holds every target this collector measures and the outboxes of the
// deciders they stream to.
type Hub struct {
	retention time.Duration
	highWater int
	batch     int
	maxTgts   int
	pushTTL   time.Duration
	now       func() time.Time
	metrics   *Metrics
	log       *zap.Logger

	// mu guards everything below and every outbox's fields.
	mu      sync.Mutex
	targets map[tkey]*target
	// byRef finds a target by the ref a source records its samples with:
	// the scraper and the lag fetcher pass the same ref for every sample
	// of a target, and deriving its key and finding it by four strings
	// was a twentieth of the collector's CPU at 10,000 targets. A ref
	// handed to the hub is never changed (as every message it keeps).
	// Entries of removed targets are skipped (gone); the map is emptied
	// once it holds twice the targets.
	byRef map[*commonv1.TargetRef]*target
	// pushedLRU holds the targets created by a pushed stat (implicit), least
	// recently pushed first, so idle ones expire in O(1) each.
	pushedLRU list.List
	// full is set while a new target is being refused, to log once per spell.
	full    bool
	members []string // sorted decider endpoints
	// shadows are the shadow deciders' outboxes (Config.Shadows), fixed
	// for the hub's life; outboxes holds them too, by address.
	shadows  []*outbox
	outboxes map[string]*outbox
	// room is closed and replaced when outboxes drain below the high water
	// mark, waking PushStats callers that wait.
	room chan struct{}
	// knative is the Knative configuration every stream carries on its
	// first batch and again when it changes (SetKnativeConfig); nil sends
	// none.
	knative *deciderv1.KnativeConfig
	// complete is the scraper's CompleteBefore: every scrape sample
	// stamped before it has been recorded.
	complete time.Time
}

type target struct {
	key      tkey
	ref      *commonv1.TargetRef
	spec     *deciderv1.TargetSpec
	hist     *history.History
	errMsg   string
	owner    string
	ready    int32 // -1 unknown
	failures []Failure
	// pushed is the target's place in Hub.pushedLRU when a pushed stat
	// created it; lastPush is when one last came.
	pushed   *list.Element
	lastPush time.Time
	// gone is set when the target leaves the hub (byRef may still hold it).
	gone bool
}

// outbox is what one decider has yet to receive. Guarded by Hub.mu.
type outbox struct {
	addr string
	// shadow is set for a shadow decider: it streams every target, and
	// falling behind never slows PushStats.
	shadow    bool
	connected bool
	// replay holds targets whose whole history goes out next, in a replay
	// batch; their live entries are dropped when they are marked.
	replay  map[tkey]bool
	pending map[tkey]*pendingTarget
	// order holds pending's entries in the order they were made, dropped
	// ones included (emptied): take sends them in it. Sorting the keys of
	// thousands of targets at every turn, a few milliseconds apart, and
	// looking each up again, was about 4 % of a collector's CPU at 10,000
	// targets.
	order []*pendingTarget
	// free holds pending's entries of past turns, emptied, for reuse:
	// never more than pending held at once.
	free    []*pendingTarget
	removed []*commonv1.TargetRef
	depth   int // samples in pending
	urgent  bool
	// sendConfig is set while Hub.knative has yet to go to this decider.
	sendConfig bool
	// sentComplete is the last ScrapesCompleteBefore the stream carried,
	// and sentRound the Hub.complete at the last take.
	sentComplete, sentRound time.Time
	// behind is set when the backlog overflowed and cleared once a flush
	// after the next replay went through: PushStats waits meanwhile.
	behind bool
	// cancel ends the current stream; set while connected.
	cancel func()
	// wake has room for one token: a signal that there is work.
	wake chan struct{}
}

type pendingTarget struct {
	ref     *commonv1.TargetRef
	spec    *deciderv1.TargetSpec
	samples []*commonv1.MetricSample
	errSet  bool
	errMsg  string
}

// Config tunes a Hub.
type Config struct {
	// Retention is the history kept per target unless SetSpec says more.
	Retention time.Duration
	// HighWater bounds the samples waiting for one decider; beyond it the
	// backlog becomes a replay and PushStats waits.
	HighWater int
	// Batch is the backlog at which a sender is woken before its flush
	// interval ends (the streams' BatchSamples); 0 means 4096.
	Batch int
	// Shadows are deciders that receive every target's stream besides its
	// owner, to compare a configuration or a version with the deciders in
	// charge; their decisions should go to an actuator that changes
	// nothing. They must not be among the deciders.
	Shadows []string
	// MaxTargets bounds the targets the hub holds; a new one beyond it is
	// refused and counted. 0 means no bound.
	MaxTargets int
	// PushedTTL is how long a target that a pushed stat created (implicit)
	// lives without another push; 0 means forever.
	PushedTTL time.Duration
	// Now stamps ready-count changes and pushes; nil means time.Now.
	Now func() time.Time
}

// New returns an empty Hub.
func New(cfg Config, m *Metrics, log *zap.Logger) *Hub {
	h := &Hub{
		retention: cfg.Retention,
		highWater: cfg.HighWater,
		batch:     cmp.Or(cfg.Batch, 4096),
		maxTgts:   cfg.MaxTargets,
		pushTTL:   cfg.PushedTTL,
		now:       cfg.Now,
		metrics:   m,
		log:       log,
		targets:   map[tkey]*target{},
		byRef:     map[*commonv1.TargetRef]*target{},
		outboxes:  map[string]*outbox{},
		room:      make(chan struct{}),
	}
	if h.now == nil {
		h.now = time.Now
	}
	for _, a := range cfg.Shadows {
		if _, dup := h.outboxes[a]; dup {
			continue
		}
		ob := newOutbox(a)
		ob.shadow = true
		h.outboxes[a] = ob
		h.shadows = append(h.shadows, ob)
	}
	return h
}

func newOutbox(addr string) *outbox {
	return &outbox{addr: addr, replay: map[tkey]bool{}, pending: map[tkey]*pendingTarget{}, wake: make(chan struct{}, 1)}
}

// streamingLocked appends the connected outboxes that stream t live (not
// waiting to replay it) to dst: its owner's and every shadow's.
func (h *Hub) streamingLocked(dst []*outbox, key tkey, t *target) []*outbox {
	if ob := h.outboxes[t.owner]; ob != nil && !ob.shadow && ob.connected && !ob.replay[key] {
		dst = append(dst, ob)
	}
	for _, ob := range h.shadows {
		if ob.connected && !ob.replay[key] {
			dst = append(dst, ob)
		}
	}
	return dst
}

// SetSpec adds a target or changes its spec. retention, if longer than the
// hub's default, is kept for this target (its stable window plus scale-down
// delay, say).
func (h *Hub) SetSpec(spec *deciderv1.TargetSpec, retention time.Duration) {
	h.TrySetSpec(spec, retention)
}

// TrySetSpec is SetSpec, and reports whether the hub holds the target
// afterwards: false when it is new and the hub holds MaxTargets (the
// refusal is counted as SetSpec's is).
func (h *Hub) TrySetSpec(spec *deciderv1.TargetSpec, retention time.Duration) bool {
	spec = proto.CloneOf(spec)
	key := keyOf(spec.GetTarget())
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expireLocked()
	t := h.targets[key]
	if t == nil && !h.roomLocked(1) {
		return false
	}
	if t != nil && t.pushed != nil {
		// Discovered now: it lives as long as its object does.
		h.pushedLRU.Remove(t.pushed)
		t.pushed = nil
	}
	h.addLocked(key, spec, retention)
	return true
}

// roomLocked reports whether the hub may take n new targets; a refusal is
// counted and logged once a spell. Callers expire idle pushed targets first.
func (h *Hub) roomLocked(n int) bool {
	if h.maxTgts <= 0 || len(h.targets)+n <= h.maxTgts {
		h.full = false
		return true
	}
	h.metrics.refused.Add(float64(n))
	if !h.full {
		h.full = true
		h.log.Warn("target limit reached; new targets are refused until some go", zap.Int("max_targets", h.maxTgts))
	}
	return false
}

// expireLocked removes the pushed targets idle for longer than PushedTTL
// and tells their deciders to forget them.
func (h *Hub) expireLocked() {
	if h.pushTTL <= 0 {
		return
	}
	now := h.now()
	for e := h.pushedLRU.Front(); e != nil; e = h.pushedLRU.Front() {
		t := e.Value.(*target)
		if now.Sub(t.lastPush) <= h.pushTTL {
			return
		}
		h.metrics.expired.Inc()
		h.removeLocked(keyOf(t.ref), true)
	}
}

// addLocked adds or updates a target; the caller has made room for a new one.
func (h *Hub) addLocked(key tkey, spec *deciderv1.TargetSpec, retention time.Duration) {
	t, ok := h.targets[key]
	if !ok {
		t = &target{key: key, ref: spec.GetTarget(), hist: history.New(max(retention, h.retention)), ready: -1}
		t.owner, _ = route.Owner(key.String(), h.members)
		h.targets[key] = t
		h.metrics.targets.Set(float64(len(h.targets)))
		// A new target goes live, not as a replay: when it was another
		// collector replica's until now (its bucket moved here), the
		// decider keeps what that replica sent and appends ours.
	}
	t.hist.Retention = max(retention, h.retention)
	if t.spec != nil && proto.Equal(t.spec, spec) {
		return
	}
	t.spec = spec
	var buf [4]*outbox
	for _, ob := range h.streamingLocked(buf[:0], key, t) {
		ob.entryLocked(key, t.ref).spec = spec
		ob.signal()
	}
}

// Known reports whether the hub measures the target.
func (h *Hub) Known(ref *commonv1.TargetRef) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.targets[keyOf(ref)]
	return ok
}

// SetReadyPods records the target's ready pod count, which decides whether
// a pushed stat wakes its decider at once. A change is also a sample (source
// PODS) in the stream and in history: with no pod left nothing is scraped,
// and only this tells the decider the target has none; kept in time order
// with the measurements, it reaches a decider rebuilt from history at the
// same tick as the live one.
func (h *Hub) SetReadyPods(ref *commonv1.TargetRef, n int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := keyOf(ref)
	t, ok := h.targets[key]
	if !ok || t.ready == n {
		return
	}
	t.ready = n
	h.recordLocked(t, &commonv1.MetricSample{
		Time:      timestamppb.New(h.now()),
		Source:    commonv1.SampleSource_SAMPLE_SOURCE_PODS,
		ReadyPods: &n,
	})
}

// Record adds a sample to a known target, keeps it in history and queues it
// for the target's decider; a sample for an unknown target is dropped and
// false returned. The hub keeps s. A pushed stat with requests in flight
// that opens a new second for a target with no ready pods (or none known)
// is sent at once, as Knative pokes its decider on the activator's first
// stat; everything else goes with the next batch.
func (h *Hub) Record(ref *commonv1.TargetRef, s *commonv1.MetricSample) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.byRefLocked(ref)
	if t == nil {
		return false
	}
	h.recordLocked(t, s)
	return true
}

// byRefLocked returns ref's target, nil when the hub does not hold it.
func (h *Hub) byRefLocked(ref *commonv1.TargetRef) *target {
	if t := h.byRef[ref]; t != nil && !t.gone {
		return t
	}
	t := h.targets[keyOf(ref)]
	if t == nil {
		return nil
	}
	if len(h.byRef) >= 2*len(h.targets) {
		clear(h.byRef)
	}
	h.byRef[ref] = t
	return t
}

// RecordPushed records pushed samples (samples[i] for refs[i]) under one
// lock, all or nothing. With implicit set, an unknown target is created as a
// KPA target with the decider's defaults (a collector without target
// discovery), and expires after PushedTTL without a push; otherwise it is
// refused. It returns -1 when everything was recorded, else the index of the
// first target it could not take: unknown, or new while the hub holds
// MaxTargets (full is then true).
func (h *Hub) RecordPushed(refs []*commonv1.TargetRef, samples []*commonv1.MetricSample, implicit bool) (refused int, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expireLocked()
	first, fresh := -1, 0
	for i, ref := range refs {
		if _, ok := h.targets[keyOf(ref)]; !ok {
			if !implicit {
				return i, false
			}
			if first < 0 {
				first = i
			}
			fresh++ // a target named twice counts twice: a bound, not a count
		}
	}
	if fresh > 0 && !h.roomLocked(fresh) {
		return first, true
	}
	now := h.now()
	for i, ref := range refs {
		key := keyOf(ref)
		t, ok := h.targets[key]
		if !ok {
			h.addLocked(key, &deciderv1.TargetSpec{Target: proto.CloneOf(ref), Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)
			t = h.targets[key]
			t.pushed = h.pushedLRU.PushBack(t)
		}
		if t.pushed != nil {
			t.lastPush = now
			h.pushedLRU.MoveToBack(t.pushed)
		}
		h.recordLocked(t, samples[i])
	}
	return -1, false
}

func (h *Hub) recordLocked(t *target, s *commonv1.MetricSample) {
	t.hist.Append(s)
	if t.errMsg != "" && s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_PUSH && s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_PODS {
		t.errMsg = "" // a good measurement ends the error state
	}
	// Outboxes not streaming t live get s with their next replay.
	var buf [4]*outbox
	for _, ob := range h.streamingLocked(buf[:0], t.key, t) {
		h.queueLocked(ob, t.key, t, s)
	}
}

// queueLocked queues s for one decider streaming t.
func (h *Hub) queueLocked(ob *outbox, key tkey, t *target, s *commonv1.MetricSample) {
	if ob.depth >= h.highWater {
		// The decider is behind. Drop its backlog and end its stream: the
		// next stream replays everything from history, which already holds
		// s. (A replay on the same stream would be added to, not replace,
		// what the decider holds.) Only a decider in charge makes PushStats
		// wait; a shadow's lag is its own.
		h.metrics.replays.WithLabelValues(ob.addr, "overflow").Inc()
		ob.behind = !ob.shadow
		h.resetLocked(ob)
		return
	}
	p := ob.entryLocked(key, t.ref)
	if n := len(p.samples); n > 0 && s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		if last := p.samples[n-1]; last.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH && sameTime(last, s) {
			history.AddInto(last, s)
			return
		}
	}
	// A pushed sample gets its own copy, as later pushes of its second are
	// added into it (above); nothing changes any other kind once recorded,
	// so every outbox shares it.
	if s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH {
		s = history.Clone(s)
	}
	p.samples = append(p.samples, s)
	ob.depth++
	if s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH && s.GetAverageConcurrency() > 0 && t.ready <= 0 {
		ob.urgent = true
	}
	// Wake the sender only when it has something new to decide: the first
	// sample (to start its flush timer), a full batch, a poke, or a change
	// of ready pods (which may be the last news of a target whose pods
	// went). A wake per sample would cost a goroutine switch per sample.
	if ob.depth == 1 || ob.depth == h.batch || ob.urgent || s.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PODS {
		ob.signal()
	}
}

// SetError puts the target in (or, with "", out of) an error state: the
// collector could not measure it. The decider hears it as "no data".
func (h *Hub) SetError(ref *commonv1.TargetRef, msg string) {
	// A broker's or a scrape's error can be long and carry anything; the
	// decider keeps a printable 1 KiB of it and refuses a batch above 16 KiB.
	msg = commonv1.Printable(commonv1.Truncate(msg, deciderv1.MaxMeasureError))
	key := keyOf(ref)
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.targets[key]
	if !ok || t.errMsg == msg {
		return
	}
	t.errMsg = msg
	var buf [4]*outbox
	for _, ob := range h.streamingLocked(buf[:0], key, t) {
		p := ob.entryLocked(key, t.ref)
		p.errSet, p.errMsg = true, msg
		ob.signal()
	}
}

// claimLocked is what a stream may say now of the samples it has been
// given: every scrape sample stamped before it, as the scraper said, and
// every sample the hub stamps as it comes (ready pod counts, stamped under
// mu), as it is no later than now. Pushed stats, stamped with the second
// they came in, are not covered.
func (h *Hub) claimLocked() time.Time {
	if now := h.now(); h.complete.After(now) {
		return now
	}
	return h.complete
}

// claimAt returns when addr's stream should next say how far its samples
// have come although nothing else waits: just after the whole second past
// what it last said, when the scraper is past that second too, so that a
// decider's tick on a whole second need not wait for the next round's
// samples. Zero when nothing more can be said before the next round ends.
func (h *Hub) claimAt(addr string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	ob := h.outboxes[addr]
	if ob == nil || !ob.connected {
		return time.Time{}
	}
	next := ob.sentComplete.Truncate(time.Second).Add(time.Second)
	if !h.complete.After(next) {
		return time.Time{}
	}
	return next.Add(time.Millisecond)
}

// CompleteBefore records that every scrape sample stamped before t has been
// recorded, and has it sent to every connected decider at once.
func (h *Hub) CompleteBefore(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !t.After(h.complete) {
		return
	}
	h.complete = t
	for _, ob := range h.outboxes {
		if ob.connected {
			ob.signal()
		}
	}
}

// Failed keeps a failure for GetWindow.
func (h *Hub) Failed(ref *commonv1.TargetRef, f Failure) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.targets[keyOf(ref)]
	if !ok {
		return
	}
	if len(t.failures) == maxFailures {
		t.failures = slices.Delete(t.failures, 0, 1)
	}
	t.failures = append(t.failures, f)
}

// Remove forgets a deleted target and tells its decider to forget it too.
func (h *Hub) Remove(ref *commonv1.TargetRef) { h.remove(ref, true) }

// Drop forgets a target this collector no longer owns (its bucket moved to
// another replica) without telling the decider, which keeps it for the new
// owner's replay.
func (h *Hub) Drop(ref *commonv1.TargetRef) { h.remove(ref, false) }

func (h *Hub) remove(ref *commonv1.TargetRef, tell bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(keyOf(ref), tell)
}

func (h *Hub) removeLocked(key tkey, tell bool) {
	t, ok := h.targets[key]
	if !ok {
		return
	}
	if t.pushed != nil {
		h.pushedLRU.Remove(t.pushed)
		t.pushed = nil
	}
	delete(h.targets, key)
	t.gone = true
	h.metrics.targets.Set(float64(len(h.targets)))
	if ob := h.outboxes[t.owner]; ob != nil && !ob.shadow {
		ob.forgetLocked(key, t.ref, tell)
	}
	for _, ob := range h.shadows {
		ob.forgetLocked(key, t.ref, tell)
	}
}

// SetDeciders replaces the decider endpoints. Targets whose owner changes
// are removed from the old owner's stream and replayed to the new one.
// It returns the outboxes to start and the endpoints to stop.
func (h *Hub) setDeciders(addrs []string) (added, gone []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	addrs = slices.DeleteFunc(slices.Clone(addrs), func(a string) bool {
		if ob := h.outboxes[a]; ob != nil && ob.shadow {
			h.log.Warn("a shadow decider is among the deciders; it stays a shadow", logkey.Decider(a))
			return true
		}
		return false
	})
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if slices.Equal(addrs, h.members) {
		return nil, nil
	}
	for _, a := range addrs {
		if _, ok := h.outboxes[a]; !ok {
			h.outboxes[a] = newOutbox(a)
			added = append(added, a)
		}
	}
	for _, a := range h.members {
		if !slices.Contains(addrs, a) {
			gone = append(gone, a)
		}
	}
	h.members = addrs
	for key, t := range h.targets {
		owner, _ := route.Owner(key.String(), addrs)
		if owner == t.owner {
			continue
		}
		if old := h.outboxes[t.owner]; old != nil {
			old.forgetLocked(key, t.ref, true)
		}
		t.owner = owner
		if ob := h.outboxes[owner]; ob != nil && ob.connected {
			h.metrics.replays.WithLabelValues(owner, "move").Inc()
			ob.dropLocked(key)
			ob.replay[key] = true
			ob.signal()
		}
	}
	for _, a := range gone {
		delete(h.outboxes, a)
	}
	return added, gone
}

// forgetDecider deletes the metric series of a decider whose sender has
// returned, unless the decider is a member again (a new sender owns the
// series then). The hub writes a decider's series only while it has an
// outbox, and does so under mu, so none comes back after this.
func (h *Hub) forgetDecider(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ob := h.outboxes[addr]; ob != nil && ob.shadow {
		return
	}
	if _, member := slices.BinarySearch(h.members, addr); !member {
		h.metrics.deleteDecider(addr)
	}
}

// resetLocked ends a decider's stream and empties its outbox.
func (h *Hub) resetLocked(ob *outbox) {
	ob.connected = false
	ob.pending, ob.order = map[tkey]*pendingTarget{}, nil
	ob.replay = map[tkey]bool{}
	ob.removed = nil
	ob.depth = 0
	h.metrics.depth.WithLabelValues(ob.addr).Set(0)
	if ob.cancel != nil {
		ob.cancel()
		ob.cancel = nil
	}
	h.wakeRoomLocked()
}

// caughtUp records that a flush to addr went through.
func (h *Hub) caughtUp(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ob := h.outboxes[addr]; ob != nil && ob.behind && ob.connected && len(ob.replay) == 0 {
		ob.behind = false
		h.wakeRoomLocked()
	}
}

// connect marks a decider's stream open: everything it owns is replayed.
// cancel ends the stream (when the decider falls too far behind).
func (h *Hub) connect(addr string, cancel func()) *outbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	ob := h.outboxes[addr]
	if ob == nil {
		return nil
	}
	ob.connected = true
	ob.cancel = cancel
	ob.sendConfig = h.knative != nil
	ob.sentComplete, ob.sentRound = time.Time{}, time.Time{}
	ob.pending, ob.order = map[tkey]*pendingTarget{}, nil
	ob.removed = nil
	ob.depth = 0
	for key, t := range h.targets {
		if t.owner == addr || ob.shadow {
			ob.replay[key] = true
		}
	}
	h.metrics.replays.WithLabelValues(addr, "connect").Add(float64(len(ob.replay)))
	ob.signal()
	h.wakeRoomLocked()
	return ob
}

// SetKnativeConfig makes kc the Knative configuration every decider stream
// carries: sent at once to the connected deciders, and first on every
// stream opened later. kc must not change afterwards.
func (h *Hub) SetKnativeConfig(kc *deciderv1.KnativeConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.knative = kc
	for _, ob := range h.outboxes {
		if ob.connected {
			ob.sendConfig = true
			ob.signal()
		}
	}
}

// disconnect drops a decider's outbox contents: the next stream replays.
func (h *Hub) disconnect(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ob := h.outboxes[addr]; ob != nil {
		h.resetLocked(ob)
	}
}

// batchSet is what one sender turn sends: replay batches first, then live.
type batchSet struct {
	replay []*deciderv1.IngestRequest
	live   []*deciderv1.IngestRequest
}

// take empties the outbox into batches of at most maxSamples samples each
// (a target's replay is never split).
func (h *Hub) take(addr string, maxSamples int) batchSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bs batchSet
	ob := h.outboxes[addr]
	if ob == nil || !ob.connected {
		return bs
	}
	if len(ob.replay) > 0 {
		cur := &deciderv1.IngestRequest{Replay: true}
		n := 0
		for _, k := range slices.SortedFunc(maps.Keys(ob.replay), tkey.compare) {
			t := h.targets[k]
			if t == nil || (t.owner != addr && !ob.shadow) {
				continue
			}
			if t.spec != nil {
				cur.Specs = append(cur.Specs, t.spec)
			}
			tm := &deciderv1.TargetMetrics{Target: t.ref, MeasureError: t.errMsg, Samples: t.hist.AppendTo(nil)}
			if t.ready >= 0 && !hasReady(tm.Samples) {
				// The count has not changed within the history (a change
				// is a sample): it held all along, so the decider may
				// take it as of now.
				ready := t.ready
				tm.ReadyPods = &ready
			}
			cur.Metrics = append(cur.Metrics, tm)
			n += len(tm.Samples)
			if n >= maxSamples {
				bs.replay = append(bs.replay, cur)
				cur, n = &deciderv1.IngestRequest{Replay: true}, 0
			}
		}
		if len(cur.Metrics) > 0 {
			bs.replay = append(bs.replay, cur)
		}
		ob.replay = map[tkey]bool{}
	}
	if len(ob.pending) > 0 || len(ob.removed) > 0 {
		cur := &deciderv1.IngestRequest{Removed: ob.removed}
		n := 0
		for _, p := range ob.order {
			if p.spec != nil {
				cur.Specs = append(cur.Specs, p.spec)
			}
			if len(p.samples) > 0 || p.errSet {
				cur.Metrics = append(cur.Metrics, &deciderv1.TargetMetrics{Target: p.ref, Samples: p.samples, MeasureError: p.errMsg})
				n += len(p.samples)
			}
			if n >= maxSamples {
				bs.live = append(bs.live, cur)
				cur, n = &deciderv1.IngestRequest{}, 0
			}
			*p = pendingTarget{} // the batch has what it held
			ob.free = append(ob.free, p)
		}
		if len(cur.Metrics)+len(cur.Specs)+len(cur.Removed) > 0 {
			bs.live = append(bs.live, cur)
		}
		clear(ob.pending)
		clear(ob.order)
		ob.order = ob.order[:0]
		ob.removed = nil
	}
	if ob.sendConfig {
		// Before any spec of this turn, so the decider resolves them with it.
		switch {
		case len(bs.replay) > 0:
			bs.replay[0].KnativeConfig = h.knative
		case len(bs.live) > 0:
			bs.live[0].KnativeConfig = h.knative
		default:
			bs.live = append(bs.live, &deciderv1.IngestRequest{KnativeConfig: h.knative})
		}
		ob.sendConfig = false
	}
	if c := h.claimLocked(); c.After(ob.sentComplete) {
		// After every sample this turn sends: those recorded before are in
		// it or went before.
		if len(bs.live) == 0 {
			bs.live = append(bs.live, &deciderv1.IngestRequest{})
		}
		bs.live[len(bs.live)-1].ScrapesCompleteBefore = timestamppb.New(c)
		ob.sentComplete = c
	}
	ob.sentRound = h.complete
	ob.urgent = false
	ob.depth = 0
	h.metrics.depth.WithLabelValues(addr).Set(0)
	h.wakeRoomLocked()
	return bs
}

// pendingWork says how much waits for addr (samples, plus one for each
// target with other news) and whether it must go at once: an urgent pushed
// stat, or a replay.
func (h *Hub) pendingWork(addr string) (work int, urgent bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ob := h.outboxes[addr]; ob != nil && ob.connected {
		h.metrics.depth.WithLabelValues(addr).Set(float64(ob.depth))
		cfg := 0
		if ob.sendConfig {
			cfg = 1
		}
		// A scrape round's end goes at once: the decider's tick may wait
		// for it.
		round := h.complete.After(ob.sentRound)
		if round {
			cfg++
		}
		return ob.depth + len(ob.pending) + len(ob.replay) + len(ob.removed) + cfg, ob.urgent || ob.sendConfig || len(ob.replay) > 0 || round
	}
	return 0, false
}

// WaitRoom blocks while any connected decider's backlog is at the high
// water mark: PushStats callers slow down instead of the collector growing.
func (h *Hub) WaitRoom(ctx context.Context) error {
	for {
		h.mu.Lock()
		full := false
		for _, ob := range h.outboxes {
			if !ob.shadow && (ob.behind || (ob.connected && ob.depth >= h.highWater)) {
				full = true
				break
			}
		}
		room := h.room
		h.mu.Unlock()
		if !full {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-room:
		}
	}
}

func (h *Hub) wakeRoomLocked() {
	close(h.room)
	h.room = make(chan struct{})
}

func (ob *outbox) entryLocked(key tkey, ref *commonv1.TargetRef) *pendingTarget {
	p, ok := ob.pending[key]
	if !ok {
		if n := len(ob.free); n > 0 {
			p, ob.free = ob.free[n-1], ob.free[:n-1]
		} else {
			p = &pendingTarget{}
		}
		p.ref = ref
		ob.pending[key] = p
		if len(ob.order) >= 2*len(ob.pending)+64 {
			// Targets that come and go between two turns leave emptied
			// entries; order stays within a small multiple of pending.
			ob.order = slices.DeleteFunc(ob.order, func(q *pendingTarget) bool { return q.ref == nil })
		}
		ob.order = append(ob.order, p)
	}
	return p
}

// forgetLocked drops key from the outbox and, with tell, has a connected
// decider forget ref.
func (ob *outbox) forgetLocked(key tkey, ref *commonv1.TargetRef, tell bool) {
	ob.dropLocked(key)
	if tell && ob.connected {
		ob.removed = append(ob.removed, ref)
		ob.signal()
	}
}

func (ob *outbox) dropLocked(key tkey) {
	if p, ok := ob.pending[key]; ok {
		ob.depth -= len(p.samples)
		delete(ob.pending, key)
		*p = pendingTarget{} // take sends nothing of it
	}
	delete(ob.replay, key)
}

func (ob *outbox) signal() {
	select {
	case ob.wake <- struct{}{}:
	default:
	}
}

// Window is what the hub holds for one target.
type Window struct {
	Target    *commonv1.TargetRef
	Spec      *deciderv1.TargetSpec
	Retention time.Duration
	Samples   []*commonv1.MetricSample
	Error     string
	Failures  []Failure // newest first
	Decider   string    // empty when its decider is not connected
	ReadyPods int32
}

// Get returns a copy of what the hub holds for the target.
func (h *Hub) Get(ref *commonv1.TargetRef) (Window, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.targets[keyOf(ref)]
	if !ok {
		return Window{}, false
	}
	return h.windowLocked(t), true
}

func (h *Hub) windowLocked(t *target) Window {
	w := Window{Target: t.ref, Spec: t.spec, Retention: t.hist.Retention, Samples: t.hist.AppendTo(nil), Error: t.errMsg, ReadyPods: t.ready,
		Failures: slices.Clone(t.failures)}
	slices.Reverse(w.Failures)
	if ob := h.outboxes[t.owner]; ob != nil && ob.connected {
		w.Decider = t.owner
	}
	return w
}

// Targets returns every target's window, sorted by key, optionally only in
// one namespace.
func (h *Hub) Targets(namespace string) []Window {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]tkey, 0, len(h.targets))
	for k, t := range h.targets {
		if namespace == "" || t.ref.GetNamespace() == namespace {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, tkey.compare)
	out := make([]Window, 0, len(keys))
	for _, k := range keys {
		out = append(out, h.windowLocked(h.targets[k]))
	}
	return out
}

// hasReady reports whether any sample carries a ready pod count.
func hasReady(samples []*commonv1.MetricSample) bool {
	return slices.ContainsFunc(samples, func(s *commonv1.MetricSample) bool { return s.ReadyPods != nil })
}

func sameTime(a, b *commonv1.MetricSample) bool {
	return a.GetTime().GetSeconds() == b.GetTime().GetSeconds() && a.GetTime().GetNanos() == b.GetTime().GetNanos()
}
