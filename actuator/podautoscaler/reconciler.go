// Package podautoscaler is the actuator's PodAutoscaler reconciler, one for
// both kinds of PodAutoscaler: tidal's own (autoscaling.tidal.dev, whose
// Kind is in this package) and Knative Serving's (actuator/knative). Per
// PodAutoscaler it applies Knative's KPA reconciler rules (knative.dev/serving
// v0.50.0 pkg/reconciler/autoscaling/kpa, the pure functions of
// actuator/kparules) to the deciders' latest decision, writes status, patches
// the target's scale subresource with an Event for every change, and keeps
// the kind's companion object. What differs between the kinds sits behind
// Kind: how status and conditions are spelled, the companion object (tidal's
// Metric, Knative's ServerlessService) and the activator probe.
//
// Decisions arrive through Scale (the deciders' RPC); the informers and the
// workqueue re-run the same reconcile on every change and on the requeues
// scale-to-zero timing needs, so nothing reaches a target without passing
// the rules.
package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/actuator/overlay"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
	"github.com/tidalscale/tidal/targetkey"
)

// Decision is a decision as a PodAutoscaler's status records it, whatever
// its kind.
type Decision = autoscalingv1alpha1.PodAutoscalerDecision

// Object is a PodAutoscaler of some kind, as its pointer type.
type Object[P any] interface {
	comparable
	metav1.Object
	runtime.Object
	DeepCopy() P
}

// Kind is what one kind of PodAutoscaler adds to the reconciler: P is the
// PodAutoscaler, C its companion object (nil when absent).
type Kind[P Object[P], C any] interface {
	// Get returns the informer's copy of name, the zero P when there is
	// none; Fetch reads it from the API server; UpdateStatus writes pa's
	// status through the status subresource, at pa's resourceVersion.
	Get(name cache.ObjectName) (P, error)
	Fetch(ctx context.Context, name cache.ObjectName) (P, error)
	UpdateStatus(ctx context.Context, pa P) (P, error)
	// WithStatus returns a copy of pa with from's status; WithDecision a
	// copy of pa with d recorded as its decision.
	WithStatus(pa, from P) P
	WithDecision(pa P, d *Decision) P
	// Urgent reports whether next's status tells readers something they
	// act on that pa's does not: a condition's status changed, or the
	// Services Knative routes through. It is written at once, never
	// coalesced (Spec.StatusInterval).
	Urgent(pa, next P) bool

	// Target is pa's scale target; Revision resolves its KPA settings;
	// Decision is the decision recorded in its status, nil when none.
	Target(pa P) scale.Target
	Revision(pa P) (kpaconfig.Revision, error)
	Decision(pa P) *Decision

	// Observe readies p.Next's status for writing (its observedGeneration,
	// p.Record when set) and reads, from caches, what the rules need: it
	// fills p.Input (but its ready pods), p.Selector, p.Scale when the
	// target's scale is read, p.Companion, and the kind's switches (Lag,
	// Probe, Paused, Dry). A PodAutoscaler that cannot be reconciled until
	// something changes comes back as a *Refusal, with p.Next's conditions
	// saying why.
	Observe(ctx context.Context, p *Pass[P, C]) error
	// SetStatus fills p.Next's status from p.Result, and returns the
	// desired scale it wrote.
	SetStatus(p *Pass[P, C]) *int32
	// Message says in words why the target goes to replicas, for its Event.
	Message(p *Pass[P, C], replicas int32) string
	// Converge brings the companion object to p.Result, once the status is
	// written and the target scaled.
	Converge(ctx context.Context, p *Pass[P, C]) error
}

// Pass is one reconcile of a PodAutoscaler, shared by the reconciler and
// the kind.
type Pass[P Object[P], C any] struct {
	// PA is the PodAutoscaler as read (after the status write, as written);
	// Next is the copy whose status the pass writes. Both are the pass's own.
	PA, Next P
	Now      time.Time
	// Decision is the decision the rules follow: Record, or the one
	// recorded; nil before the first. Record, when set, is a new decision to
	// record in Next's status.
	Decision, Record *Decision
	// Target is PA's scale target.
	Target scale.Target

	// Set by Observe.
	// Input is what the rules read; the reconciler sets Decider before
	// Observe and ReadyPods after.
	Input kparules.Input
	// Scale is the target's scale, when read.
	Scale scale.Scale
	// Selector selects the target's pods.
	Selector labels.Selector
	// Companion is the kind's companion object as Observe read it from its
	// cache, for a kind whose status follows it (Knative's); a kind may
	// read it in Converge instead.
	Companion C
	// Lag applies the lag strategy's rules instead of the KPA's.
	Lag bool
	// Probe asks whether the activator is in the target's path before the
	// last pod goes; nil means nothing has to be (tidal has no activator).
	Probe kparules.Prober
	// Paused and Dry hold back the scale write, as tidal's annotations ask.
	Paused, Dry bool
	// Waiting holds back a scale write the rules made from a status this
	// replica took over and another may have left behind (takeoverWait).
	Waiting bool

	// Set by the reconciler.
	Result kparules.Result
	// Patch is the scale the pass writes to the target; nil for none. Held
	// is the write a dry run or a pause held back.
	Patch, Held *int32
	// Probed is true when the rules probed the activator.
	Probed bool
}

// Refusal is a PodAutoscaler that cannot be reconciled until something
// changes: a missing target, one without /scale, an invalid spec. It is
// reported in status and by a Warning Event; a worker absorbs it, Scale
// returns it.
type Refusal struct {
	Err error
	// Event is the Warning's reason; Report is false when the same refusal
	// was reported already.
	Event  string
	Report bool
	// Retry looks again after Spec.TargetRetry.
	Retry bool
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// Outcome is what one reconcile did to the target.
type Outcome struct {
	// Before and After are the target's spec.replicas before and after.
	Before, After int32
	// Want is what the rules settled on; -1 means unknown.
	Want int32
	// Patched is true when the target's scale was written.
	Patched bool
	// Held is the write a dry run or a pause held back, if any; Paused says
	// it was a pause.
	Held   *int32
	Paused bool
	// Requeue is when to reconcile again; 0 means only on events.
	Requeue time.Duration
	// Refused is why the target could not be reconciled, already reported.
	Refused error
}

// Spec is what a kind gives the reconciler.
type Spec[P Object[P], C any] struct {
	Kind Kind[P, C]
	// Name names the kind in errors, logs and the workqueue
	// ("podautoscaler"); GVK is its group, version and kind, for Events.
	Name string
	GVK  schema.GroupVersionKind
	// Informer is the PodAutoscalers'. Handles, when set, picks the ones
	// this reconciler serves (a Knative class); the others cost nothing
	// but their cached copy.
	Informer cache.SharedIndexInformer
	Handles  func(pa P) bool
	// Synced are the kind's other caches; Run, informers the reconciler
	// runs itself (the caller starts the others).
	Synced []cache.InformerSynced
	Run    []cache.SharedIndexInformer
	// Gone, when set, is called for a PodAutoscaler this replica owns
	// that no longer exists.
	Gone func(ctx context.Context, name cache.ObjectName) error
	// Config holds what both kinds' controllers are configured with; the
	// reconciler reads Workers, TargetRetry, StatusInterval, Status and
	// Claims.
	Config
	// ProbeRetry is how soon a pass whose activator probe failed runs
	// again.
	ProbeRetry time.Duration
	// Fallback, when set, applies the decisions for targets no
	// PodAutoscaler names.
	Fallback *scale.Applier
}

// TargetScaler reads and writes targets' scale subresources.
type TargetScaler interface {
	GetScale(ctx context.Context, t scale.Target) (scale.Scale, error)
	SetReplicas(ctx context.Context, t scale.Target, replicas int32) error
}

// Reconciler reconciles the PodAutoscalers of one kind.
type Reconciler[P Object[P], C any] struct {
	spec     Spec[P, C]
	kind     Kind[P, C]
	log      *zap.Logger
	clock    clock.PassiveClock
	scaler   TargetScaler
	recorder record.EventRecorder

	// Controller is the workqueue and its workers (Run, HasSynced), and
	// which PodAutoscalers this replica reconciles.
	*controller.Controller
	// informers are the goroutines of spec.Run, which Run waits for.
	informers sync.WaitGroup

	// locks serialises reconciles of one PodAutoscaler between the workers
	// and Scale calls. One lock per PodAutoscaler, not a stripe shared by
	// names that hash alike: a pass waiting for the write budget holds its
	// lock, and a wake must not wait behind another PodAutoscaler's
	// scale-down.
	locks keyedLocks
	// written holds the PodAutoscalers this process wrote that the
	// informer has not delivered yet: reads see them at once, and their
	// watch events are known as echoes of our own writes.
	written *overlay.Overlay[cache.ObjectName, P]
	// reports are, with Spec.StatusInterval, what this replica keeps of
	// the PodAutoscalers it reconciles to coalesce its reports: one entry
	// per PodAutoscaler in the informer's cache, dropped when it leaves it
	// or another replica owns it. reportsMu guards the map; an entry's
	// fields are guarded by its PodAutoscaler's lock.
	reportsMu sync.Mutex
	reports   map[cache.ObjectName]*report[P]
	// epoch counts changes of ownership: a status write made in an earlier
	// epoch proves nothing about who writes now.
	epoch atomic.Uint64
	// podIndexer is the pod cache, indexed by label.
	podIndexer cache.Indexer
	// selectors maps pods to the PodAutoscalers whose targets select them.
	selectors *pods.Selectors[cache.ObjectName]
}

// indexTarget indexes PodAutoscalers by their scale target.
const indexTarget = "scaleTarget"

// podEventDelay gathers the readiness changes of a scale-up or scale-down
// (pods turn ready one by one, over about a tick) into one reconcile and one
// status write.
const podEventDelay = 2 * time.Second

// ownWriteRequeue is how soon a reconcile that changed what the rules read
// from status runs again: at once, as a watch event would.
const ownWriteRequeue = time.Millisecond

// NewReconciler returns a Reconciler of spec's kind. It registers its event
// handlers on spec.Informer and on podInformer, which it trims and indexes
// by label (once, when kinds share it); the caller starts them.
func NewReconciler[P Object[P], C any](spec Spec[P, C], log *zap.Logger, clk clock.PassiveClock, podInformer cache.SharedIndexInformer,
	scaler TargetScaler, recorder record.EventRecorder,
) (*Reconciler[P, C], error) {
	if spec.Workers <= 0 {
		spec.Workers = 1
	}
	if spec.TargetRetry <= 0 {
		spec.TargetRetry = 10 * time.Second
	}
	if spec.Handles == nil {
		spec.Handles = func(P) bool { return true }
	}
	r := &Reconciler[P, C]{
		spec:      spec,
		kind:      spec.Kind,
		log:       log,
		clock:     clk,
		scaler:    scaler,
		recorder:  recorder,
		written:   overlay.New[cache.ObjectName, P](),
		reports:   map[cache.ObjectName]*report[P]{},
		selectors: pods.NewSelectors[cache.ObjectName](),
	}
	if err := spec.Informer.AddIndexers(cache.Indexers{indexTarget: r.targetIndex}); err != nil {
		return nil, fmt.Errorf("%s target index: %w", spec.Name, err)
	}
	if err := podInformer.SetTransform(pods.Trim); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if _, ok := podInformer.GetIndexer().GetIndexers()[pods.IndexLabel]; !ok {
		if err := pods.AddLabelIndex(podInformer); err != nil {
			return nil, fmt.Errorf("pod label index: %w", err)
		}
	}
	r.podIndexer = podInformer.GetIndexer()
	synced := append([]cache.InformerSynced{spec.Informer.HasSynced, podInformer.HasSynced}, spec.Synced...)
	r.Controller = controller.New(controller.Config{Name: r.logKey(), Workers: spec.Workers, RetryQPS: 50, RetryBurst: 300, Clock: spec.queueClock},
		log, r.sync, synced...)

	_, err := spec.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pa, ok := obj.(P); !ok || spec.Handles(pa) {
				r.Enqueue(obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, n := old.(P), cur.(P)
			if o.GetResourceVersion() == n.GetResourceVersion() || !spec.Handles(o) && !spec.Handles(n) {
				return
			}
			// The echo of our own write holds what we just reconciled.
			if spec.Handles(o) == spec.Handles(n) && r.written.Own(cache.MetaObjectToName(n), n.GetResourceVersion()) {
				return
			}
			r.Enqueue(cur)
		},
		DeleteFunc: r.Enqueue,
	})
	if err != nil {
		return nil, err
	}
	// A pod maps to the PodAutoscalers whose targets select it: readiness
	// changes move actualScale and the Active condition.
	_, err = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: r.enqueuePod,
		UpdateFunc: func(old, cur any) {
			o, n := pods.Of(old), pods.Of(cur)
			if o != nil && n != nil && o.ResourceVersion != n.ResourceVersion && o.Ready() != n.Ready() {
				r.enqueuePod(cur)
			}
		},
		DeleteFunc: r.enqueuePod,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// logKey names the kind in log fields and the workqueue
// ("knative-podautoscaler").
func (r *Reconciler[P, C]) logKey() string { return strings.ReplaceAll(r.spec.Name, " ", "-") }

// Run runs the reconciler's own informers and the workers until ctx ends,
// and returns once all have stopped.
func (r *Reconciler[P, C]) Run(ctx context.Context) error {
	for _, inf := range r.spec.Run {
		r.informers.Go(func() { inf.RunWithContext(ctx) })
	}
	defer r.informers.Wait()
	return r.Controller.Run(ctx)
}

// SetOwnership shares the PodAutoscalers among actuator replicas: owner
// names the replica that reconciles each one. Call Resync when this replica
// gains or loses PodAutoscalers.
func (r *Reconciler[P, C]) SetOwnership(owner controller.OwnerFunc) {
	r.epoch.Add(1)
	r.Set(owner)
}

// Resync queues every PodAutoscaler this replica owns, after a change of
// ownership.
func (r *Reconciler[P, C]) Resync() {
	r.epoch.Add(1)
	r.Controller.Resync(r.spec.Informer.GetStore())
}

// Kept is what the reconciler keeps beyond the informers' copies: the pod
// selectors of the PodAutoscalers it reconciles, and its writes the cache
// has not delivered yet with what it keeps to coalesce them.
func (r *Reconciler[P, C]) Kept() (selectors, writes int) {
	r.reportsMu.Lock()
	n := len(r.reports)
	r.reportsMu.Unlock()
	return r.selectors.Len(), r.written.Len() + n
}

// targetIndex keys a PodAutoscaler this reconciler serves by its target's
// identity (targetkey.Of), the way Scale looks targets up.
func (r *Reconciler[P, C]) targetIndex(obj any) ([]string, error) {
	pa, ok := obj.(P)
	if !ok || !r.spec.Handles(pa) {
		return nil, nil
	}
	k, err := targetKey(r.kind.Target(pa))
	if err != nil {
		return nil, nil //nolint:nilerr // a malformed apiVersion is reported by reconcile
	}
	return []string{k}, nil
}

// targetKey is t's identity as every service spells it (targetkey.Of),
// for a well-formed apiVersion.
func targetKey(t scale.Target) (string, error) {
	if _, err := t.GroupVersionKind(); err != nil {
		return "", err
	}
	return targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind), nil
}

func (r *Reconciler[P, C]) enqueuePod(obj any) {
	pod := pods.Of(obj)
	if pod == nil {
		return
	}
	r.selectors.Matching(pod.Namespace, pod.Labels, func(name cache.ObjectName) { r.AddAfter(name, podEventDelay) })
}

func (r *Reconciler[P, C]) lock(name cache.ObjectName) func() { return r.locks.lock(name) }

// keyedLocks is a lock per name, held in the map only while someone holds
// or waits for it: the map is bounded by the callers at once (workers and
// Scale calls), and no lock is freed while held. The zero value is ready.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[cache.ObjectName]*keyedLock
}

type keyedLock struct {
	sync.Mutex
	// refs counts holders and waiters; guarded by keyedLocks.mu.
	refs int
}

// lock takes name's lock and returns its unlock.
func (k *keyedLocks) lock(name cache.ObjectName) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[cache.ObjectName]*keyedLock{}
	}
	l := k.locks[name]
	if l == nil {
		l = &keyedLock{}
		k.locks[name] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, name)
		}
		k.mu.Unlock()
	}
}

func (r *Reconciler[P, C]) ref(pa P) *corev1.ObjectReference { return EventRef(r.spec.GVK, pa) }

// EventRef is o, of kind gvk, as an Event's involved object (the
// recorder's scheme need not know the kind).
func EventRef(gvk schema.GroupVersionKind, o metav1.Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String(),
		Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()}
}

// current returns the PodAutoscaler name as this process last saw it: the
// cache's copy, or our own newer write the cache has not delivered yet.
// Callers treat it as read-only. The zero P means it does not exist.
func (r *Reconciler[P, C]) current(name cache.ObjectName) (P, error) {
	var none P
	pa, err := r.kind.Get(name)
	if err != nil {
		return none, err
	}
	if pa == none {
		r.written.Delete(name)
		r.forget(name)
		return none, nil
	}
	if w, ok := r.written.Newer(name, pa.GetResourceVersion()); ok {
		pa = w
	}
	return r.withPending(name, pa), nil
}

// sync is a worker's reconcile of name.
func (r *Reconciler[P, C]) sync(ctx context.Context, name cache.ObjectName) (time.Duration, error) {
	out, err := r.Sync(ctx, name)
	return out.Requeue, err
}

// supersededRetry is how soon a worker's reconcile that gave way to a
// decider's decision for the same PodAutoscaler runs again: the decision's
// pass reconciles it too, unless that one is refused as stale.
const supersededRetry = time.Second

// Sync reconciles the PodAutoscaler name once, from the newest copy this
// process knows, as a worker does.
func (r *Reconciler[P, C]) Sync(ctx context.Context, name cache.ObjectName) (Outcome, error) {
	ctx, release, err := r.claim(ctx, name, writebudget.Down, 0)
	var out Outcome
	if err == nil {
		defer release()
		out, err = r.syncNow(ctx, name)
	}
	if errors.Is(err, writebudget.ErrSuperseded) {
		return Outcome{Requeue: supersededRetry}, nil
	}
	return out, err
}

// claim takes name's slot in Spec.Claims (apart from other kinds') for a
// pass of class and sequence, and returns ctx carrying the claim and its
// release; without Claims, ctx and a no-op.
func (r *Reconciler[P, C]) claim(ctx context.Context, name cache.ObjectName, class writebudget.Class, sequence uint64) (context.Context, func(), error) {
	if r.spec.Claims == nil {
		return ctx, func() {}, nil
	}
	c, err := r.spec.Claims.Claim(r.spec.Name+" "+name.String(), name.Namespace, class, sequence)
	if err != nil {
		return ctx, nil, err
	}
	return writebudget.WithClaim(ctx, c), func() { r.spec.Claims.Release(c) }, nil
}

// syncNow is Sync once the caller may write.
func (r *Reconciler[P, C]) syncNow(ctx context.Context, name cache.ObjectName) (Outcome, error) {
	unlock := r.lock(name)
	defer unlock()
	pa, err := r.current(name)
	if err != nil {
		return Outcome{}, err
	}
	var none P
	_, mine := r.Owns(name)
	if pa == none || !r.spec.Handles(pa) || !mine {
		// Gone, of another class now, or reconciled by another replica:
		// its pods need not wake us.
		r.selectors.Delete(name)
		r.forget(name)
		if pa == none && mine && r.spec.Gone != nil {
			return Outcome{}, r.spec.Gone(ctx, name)
		}
		return Outcome{}, nil
	}
	if pa.GetDeletionTimestamp() != nil {
		// Being deleted: leave the target and the companion object as they
		// are, for the garbage collector.
		return Outcome{}, nil
	}
	out, _, err := r.reconcileLatest(ctx, name, nil, false)
	return out, err
}

// reconcileLatest reconciles name from the newest copy this process knows,
// reading it again from the API server after a conflict (someone else's
// write the cache is behind). apply, when set, prepares each attempt (a
// Scale call records its decision there) and may end the call with a result
// of its own. It returns the copy the last attempt started from. The caller
// holds name's lock.
func (r *Reconciler[P, C]) reconcileLatest(ctx context.Context, name cache.ObjectName,
	apply func(pa P) (decision *Decision, done bool), dryRun bool,
) (out Outcome, pa P, err error) {
	var none P
	attempt := 0
	// A conflict after the target was patched (a status write after it, or
	// the companion's) runs the pass again, which finds the target patched
	// already: the call's outcome still reports the change, from the
	// replicas before it.
	var patched, reconciled bool
	var before int32
	defer func() {
		if patched && reconciled && err == nil && !out.Patched {
			out.Before, out.Patched = before, true
		}
	}()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reconciled = false
		if attempt++; attempt > 1 {
			fresh, err := r.kind.Fetch(ctx, name)
			if err != nil {
				return fmt.Errorf("get %s %s: %w", r.spec.Name, name, err)
			}
			r.remember(name, fresh)
		}
		var err error
		if pa, err = r.current(name); err != nil || pa == none {
			out = Outcome{}
			return err
		}
		var dec *Decision
		if apply != nil {
			var done bool
			if dec, done = apply(pa); done {
				out = Outcome{}
				return nil
			}
		}
		out, err = r.reconcile(ctx, pa, dec, dryRun)
		reconciled = true
		if out.Patched && !patched {
			patched, before = true, out.Before
		}
		return err
	})
	return out, pa, err
}

// reconcile converges pa's target, status and companion object: observe
// (caches only), the rules, status, then the target and the companion.
// decision, when set, is a new decision to record in status and follow;
// dryRun computes everything and writes nothing. pa is not changed; the
// caller holds its lock.
//
// Status is written first, once, with the resourceVersion pa was read at,
// and carries the decision the target is about to be scaled to: if another
// writer recorded a newer decision meanwhile, the write conflicts and the
// target is left alone, so a late copy never undoes a newer decision. A
// replica that holds pa under the Leases (holds) has nobody to conflict
// with, and scales the target first: a wake from zero waits for one API
// write, not two, as with Knative's autoscaler.
func (r *Reconciler[P, C]) reconcile(ctx context.Context, pa P, decision *Decision, dryRun bool) (Outcome, error) {
	name := cache.MetaObjectToName(pa)
	p := &Pass[P, C]{PA: pa, Next: pa.DeepCopy(), Now: r.clock.Now(), Decision: r.kind.Decision(pa), Target: r.kind.Target(pa)}
	if decision != nil {
		p.Decision = decision
		if !dryRun {
			p.Record = decision
		}
	}
	p.Input.Decider = kpaspec.Status{DesiredScale: kpaspec.ScaleUnknown}
	if d := p.Decision; d != nil {
		p.Input.Decider.DesiredScale = d.DesiredScale
		if d.ExcessBurstCapacity != nil {
			p.Input.Decider.ExcessBurstCapacity = *d.ExcessBurstCapacity
		}
		p.Input.Decider.PredictedIdle = d.PredictedIdle && d.DesiredScale == 0
	}
	out := Outcome{Want: kpaspec.ScaleUnknown}

	// Observe.
	err := r.kind.Observe(ctx, p)
	if refusal := (*Refusal)(nil); errors.As(err, &refusal) {
		return r.refuse(ctx, p, out, refusal, dryRun)
	}
	if err != nil {
		return out, err
	}
	out.Before, out.After = p.Scale.Replicas, p.Scale.Replicas
	if p.Input.ReadyPods, err = pods.CountReady(r.podIndexer, pa.GetNamespace(), p.Selector); err != nil {
		return out, err
	}
	if !dryRun {
		r.selectors.Set(name, pa.GetNamespace(), p.Selector)
	}

	// Rules.
	if p.Lag {
		p.Result = kparules.ReconcileLag(p.Input)
	} else {
		p.Result = kparules.Reconcile(p.Input, func() bool {
			p.Probed = true
			return p.Probe == nil || p.Probe()
		})
	}
	res := &p.Result
	out.Want = res.Want
	if len(res.Requeue) > 0 {
		out.Requeue = slices.Min(res.Requeue)
	}
	if res.AsyncProbe && (out.Requeue <= 0 || r.spec.ProbeRetry < out.Requeue) {
		// Knative starts a background probe every second; the next
		// reconcile probes again instead.
		out.Requeue = r.spec.ProbeRetry
	}
	if res.Patch != nil {
		to := *res.Patch
		if dryRun || p.Dry || p.Paused {
			p.Held, out.Held = &to, &to
		} else {
			p.Patch = &to
		}
	}
	out.Paused = p.Paused
	if dryRun {
		return out, nil
	}
	rep := r.reportOf(name)
	if p.Patch != nil && p.Record == nil {
		if wait := r.takeoverWait(rep, pa, p.Now); wait > 0 {
			p.Patch, p.Waiting = nil, true
			if out.Requeue <= 0 || wait < out.Requeue {
				out.Requeue = wait
			}
		}
	}

	// Status.
	desired := r.kind.SetStatus(p)
	// Knative's reconciler runs again on the watch event of its own status
	// update, and its rules count on that pass: a PodAutoscaler that just
	// went inactive, or whose desired scale (the SKS mode) changed, is only
	// then put on its way to zero. The controller ignores the echoes of its
	// own writes, so a reconcile that changes either asks for the next pass
	// itself; that pass reads them back unchanged and asks for none.
	if res.ActiveChanged || !ptr.Equal(p.Input.PriorDesiredScale, desired) {
		out.Requeue = ownWriteRequeue
	}
	// Before a patch the write is made even when status is unchanged: it
	// is what proves pa current, unless this replica holds pa; then the
	// target goes first and status follows.
	targetFirst := p.Patch != nil && rep != nil && r.holds(rep, p.PA)
	if !targetFirst {
		if err := r.writeStatus(ctx, p, p.Patch != nil); err != nil {
			return out, err
		}
	}

	// Target and companion.
	if res.Patch != nil {
		msg := r.kind.Message(p, *res.Patch)
		switch {
		case p.Dry:
			r.recorder.Eventf(r.ref(p.PA), corev1.EventTypeNormal, EventDryRun, "dry run, not applied: %s", msg)
		case p.Paused:
			r.recorder.Eventf(r.ref(p.PA), corev1.EventTypeNormal, EventPaused, "paused at %d, not applied: %s", p.Scale.Replicas, msg)
		case p.Waiting:
			r.log.Info("scale write waits for the decider after a takeover", zap.String(r.logKey(), name.String()),
				zap.Int32("at", p.Scale.Replicas), zap.Int32("rules", *res.Patch))
		default:
			began := r.clock.Now()
			if err := r.scaler.SetReplicas(ctx, p.Target, *p.Patch); err != nil {
				return out, fmt.Errorf("scale %s: %w", p.Target, err)
			}
			took := r.clock.Since(began)
			out.After, out.Patched = *p.Patch, true
			if r.turned(name, *p.Patch-p.Scale.Replicas) {
				r.recorder.Event(r.ref(p.PA), corev1.EventTypeNormal, EventScaled, msg)
			}
			var seq int64
			var reason string
			if d := p.Decision; d != nil {
				seq, reason = d.Sequence, d.Reason
			}
			r.log.Info("scaled", zap.String(r.logKey(), name.String()), zap.Int32("from", p.Scale.Replicas),
				zap.Int32("to", *p.Patch), zap.Int64("sequence", seq), zap.String("reason", reason), zap.Duration("write", took))
		}
	}
	if targetFirst {
		if err := r.writeStatus(ctx, p, false); err != nil {
			return out, err
		}
	}
	return out, r.kind.Converge(ctx, p)
}

// refuse writes the status of a PodAutoscaler Observe refused and reports
// the refusal with a Warning when it is new.
func (r *Reconciler[P, C]) refuse(ctx context.Context, p *Pass[P, C], out Outcome, refusal *Refusal, dryRun bool) (Outcome, error) {
	out.Refused = refusal.Err
	if refusal.Retry {
		out.Requeue = r.spec.TargetRetry
	}
	if dryRun {
		return out, nil
	}
	if err := r.writeStatus(ctx, p, false); err != nil {
		return out, err
	}
	if refusal.Report {
		r.recorder.Event(r.ref(p.PA), corev1.EventTypeWarning, refusal.Event, refusal.Err.Error())
	}
	return out, nil
}

// writeStatus writes p.Next's status if it differs from p.PA's (or always,
// with force), with the resourceVersion p.PA was read at, and remembers the
// write so the next read sees it before the cache does. A write that
// conflicts leaves p.PA as it was.
//
// While this replica holds the PodAutoscaler (see holds), the write waits
// until its changes pause for Spec.StatusInterval and its ready pods reach
// the desired scale (dueAfter), and no longer than statusDebounce
// intervals after the first change not written yet, and
// every pass meanwhile reads and adds to the status kept for it: one write
// reports all they did, the decisions they recorded included, and no
// force is needed, as no other replica writes it. A decision that changes
// nothing a reader acts on (routine) makes no write due at all.
func (r *Reconciler[P, C]) writeStatus(ctx context.Context, p *Pass[P, C], force bool) error {
	name := cache.MetaObjectToName(p.PA)
	rep := r.reportOf(name)
	var none P
	pending := rep != nil && rep.pending != none && rep.pending == p.PA
	// Observe and SetStatus change only Next's status.
	changed := !equality.Semantic.DeepEqual(p.PA, p.Next)
	if !force && !pending && !changed {
		return nil
	}
	why := r.unheld(rep, p.PA)
	switch {
	case why == "" && r.kind.Urgent(p.PA, p.Next):
		why = WriteUrgent
	case why == "":
		why = WriteDue
		now := r.clock.Now()
		switch {
		case !pending || rep.quiet:
			// No write is due yet. A decision that changes nothing a
			// reader acts on is kept, not written: the next change's
			// write (or the handover's, FlushPending) carries it.
			if !force && (!changed || r.routine(p.PA, p.Next)) {
				if changed {
					rep.pending, rep.quiet, p.PA = p.Next, true, p.Next
				}
				return nil
			}
			rep.first, rep.quiet = now, false
			rep.due = r.dueAfter(rep, p, now)
			r.countWait(p.PA, p.Next)
		case changed && !r.routine(p.PA, p.Next):
			rep.due = r.dueAfter(rep, p, now)
		}
		if now.Before(rep.due) {
			if changed {
				rep.pending, p.PA = p.Next, p.Next
			}
			r.AddAfter(name, rep.due.Sub(now))
			return nil
		}
	case force:
		why = WriteForced
	}
	if p.PA.GetResourceVersion() == "" {
		// An unconditional write could undo a newer decision.
		return fmt.Errorf("update status of %s %s: no resourceVersion to write at", r.spec.Name, name)
	}
	if r.spec.Claims != nil {
		// The write outlives its caller (below), its wait for the budget
		// does not.
		var err error
		if ctx, err = r.spec.Claims.Prepay(ctx); err != nil {
			return fmt.Errorf("update status of %s %s: %w", r.spec.Name, name, err)
		}
	}
	wctx, cancel := scale.Finishing(ctx) // the scale it records may be done already
	defer cancel()
	updated, err := r.kind.UpdateStatus(wctx, p.Next)
	if err != nil {
		if rep != nil && apierrors.IsConflict(err) {
			// Someone else wrote it: the next pass starts from theirs.
			rep.pending, rep.quiet = none, false
		}
		return fmt.Errorf("update status of %s %s: %w", r.spec.Name, name, err)
	}
	r.remember(name, updated)
	r.countWrite(why)
	if rep != nil {
		rep.base, rep.epoch, rep.pending, rep.quiet = updated, r.epoch.Load(), none, false
	}
	p.PA = updated
	return nil
}

// remember keeps pa, the newest copy of name this process read or wrote,
// for reads until the informer delivers it. Like the informer's copies it
// goes without its managed fields: no pass reads them, they are most of a
// PodAutoscaler as the API server returns it (a status write's response is
// the report's base until the cache has it), and a write without them
// leaves the server's as they are.
func (r *Reconciler[P, C]) remember(name cache.ObjectName, pa P) {
	pa.SetManagedFields(nil)
	r.written.Put(name, pa.GetResourceVersion(), pa)
}

// statusDebounce bounds, in status intervals, how long after the first
// change a coalesced status write may wait for the changes to pause.
const statusDebounce = 3

// dueAfter is when the status write that waits since rep.first is due,
// after p's change at now. A load change moves the target in steps a tick
// apart and its pods become Ready (or go) after each, so the write waits
// for the changes to pause for an interval and reports them all; while the
// ready pods differ from the desired scale, their coming is the next
// change, so it waits for them. Never later than statusDebounce intervals
// after the first change.
func (r *Reconciler[P, C]) dueAfter(rep *report[P], p *Pass[P, C], now time.Time) time.Time {
	last := rep.first.Add(statusDebounce * r.spec.StatusInterval)
	if res := p.Result; res.DesiredScale >= 0 && res.ActualScale != res.DesiredScale {
		return last
	}
	if next := now.Add(r.spec.StatusInterval); next.Before(last) {
		return next
	}
	return last
}
