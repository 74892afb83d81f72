package scale

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
)

// recorder timestamps what the run's informers see: every change of a
// Deployment's spec.replicas, every decision the actuator records in a
// PodAutoscaler's status.lastDecision, and the load changes the run makes.
type recorder struct {
	// mu guards everything below.
	mu        sync.Mutex
	kpa       map[string]*kpaLog // by target name
	lag       map[string]*lagLog
	decisions []decisionAge
}

type kpaLog struct {
	created time.Time
	// level is the replicas the target's first load implies; switching
	// is true for targets whose load switches.
	level     int32
	switching bool
	// replicas is the Deployment's spec.replicas as last seen; -1 before.
	replicas      int32
	moves         []move
	firstDecision time.Time
	lastSequence  int64
	changes       []loadChange
}

// move is a change of spec.replicas seen at a time.
type move struct {
	at       time.Time
	from, to int32
}

// loadChange is a switch of a target's load from a level implying from
// replicas to one implying to, when spec.replicas was replicasAt.
type loadChange struct {
	at                   time.Time
	from, to, replicasAt int32
}

type lagLog struct {
	created, firstScaled time.Time
	// replicas is the Deployment's spec.replicas as last seen; moves are
	// the times it changed.
	replicas int32
	moves    []time.Time
}

// decisionAge is how old a decision was (since the decider made it, by its
// sequence) when a PodAutoscaler's status showed it recorded.
type decisionAge struct {
	at  time.Time
	age time.Duration
}

func newRecorder() *recorder {
	return &recorder{kpa: map[string]*kpaLog{}, lag: map[string]*lagLog{}}
}

func (r *recorder) addKPA(name string, created time.Time, level int32, switching bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kpa[name] = &kpaLog{created: created, replicas: -1, level: level, switching: switching}
}

func (r *recorder) addLag(name string, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lag[name] = &lagLog{created: created, replicas: -1}
}

// switched records a load change of target.
func (r *recorder) switched(target string, at time.Time, from, to int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.kpa[target]
	k.changes = append(k.changes, loadChange{at: at, from: from, to: to, replicasAt: k.replicas})
}

// run starts the Deployment and PodAutoscaler informers over ns and
// returns once they have synced; stop waits for them to end.
func (r *recorder) run(ctx context.Context, client kubernetes.Interface, crds tidalclient.Interface, ns string) (stop func(), err error) {
	runCtx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	deps := factory.Apps().V1().Deployments().Informer()
	_, _ = deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.deployment(obj) },
		UpdateFunc: func(_, obj any) { r.deployment(obj) },
	})
	tidalFactory := tidalinformers.NewSharedInformerFactoryWithOptions(crds, 0, tidalinformers.WithNamespace(ns))
	pas := tidalFactory.Autoscaling().V1alpha1().PodAutoscalers().Informer()
	_, _ = pas.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.podAutoscaler(obj) },
		UpdateFunc: func(_, obj any) { r.podAutoscaler(obj) },
	})
	factory.Start(runCtx.Done())
	tidalFactory.Start(runCtx.Done())
	stop = func() {
		cancel()
		factory.Shutdown()
		tidalFactory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), deps.HasSynced, pas.HasSynced) {
		stop()
		return nil, fmt.Errorf("recorder: informers did not sync: %w", ctx.Err())
	}
	return stop, nil
}

func (r *recorder) deployment(obj any) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok || d.Spec.Replicas == nil {
		return
	}
	now, replicas := time.Now(), *d.Spec.Replicas
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.kpa[d.Name]; ok {
		if k.replicas >= 0 && k.replicas != replicas {
			k.moves = append(k.moves, move{at: now, from: k.replicas, to: replicas})
		}
		k.replicas = replicas
		return
	}
	if l, ok := r.lag[d.Name]; ok {
		if replicas > 0 && l.firstScaled.IsZero() {
			l.firstScaled = now
		}
		if l.replicas != replicas && l.replicas >= 0 {
			l.moves = append(l.moves, now)
		}
		l.replicas = replicas
	}
}

func (r *recorder) podAutoscaler(obj any) {
	pa, ok := obj.(*autoscalingv1alpha1.PodAutoscaler)
	if !ok || pa.Status.LastDecision == nil {
		return
	}
	now, seq := time.Now(), pa.Status.LastDecision.Sequence
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.kpa[pa.Name]
	if !ok || seq <= k.lastSequence {
		return
	}
	if k.lastSequence == 0 {
		k.firstDecision = now
	}
	k.lastSequence = seq
	r.decisions = append(r.decisions, decisionAge{at: now, age: now.Sub(time.UnixMilli(seq))})
}

// undecided counts the KPA targets without a recorded decision and the lag
// targets never scaled above zero.
func (r *recorder) undecided() (kpa, lag int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.kpa {
		if k.firstDecision.IsZero() {
			kpa++
		}
	}
	for _, l := range r.lag {
		if l.firstScaled.IsZero() {
			lag++
		}
	}
	return kpa, lag
}

// changeResult is the outcome of one load change.
type changeResult struct {
	target string
	change loadChange
	// firstMove is when spec.replicas first moved towards change.to, reached
	// when it first equalled it; zero when it did not before the deadline.
	firstMove, reached time.Time
	already            bool
	// up is the direction a move must take to count; deadline is the
	// target's next change, or the end.
	up       bool
	deadline time.Time
}

// results evaluates every load change against the moves that followed it,
// up to the target's next change or end.
func (r *recorder) results(end time.Time) []changeResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []changeResult
	for name, k := range r.kpa {
		for i, c := range k.changes {
			deadline := end
			if i+1 < len(k.changes) {
				deadline = k.changes[i+1].at
			}
			res := changeResult{target: name, change: c, already: c.replicasAt == c.to, deadline: deadline}
			// Towards the new level's replicas from where spec.replicas
			// was; from the old level's if it was unknown.
			up := c.to > c.from
			if c.replicasAt >= 0 && c.replicasAt != c.to {
				up = c.to > c.replicasAt
			}
			res.up = up
			for _, m := range k.moves {
				if !m.at.After(c.at) || !m.at.Before(deadline) {
					continue
				}
				if res.firstMove.IsZero() && (m.to > m.from) == up {
					res.firstMove = m.at
				}
				if res.reached.IsZero() && m.to == c.to {
					res.reached = m.at
				}
			}
			out = append(out, res)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].change.at.Before(out[j].change.at) })
	return out
}

// applied counts the changes of spec.replicas seen from start to end, of
// every target.
func (r *recorder) applied(start, end time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	in := func(t time.Time) bool { return !t.Before(start) && !t.After(end) }
	for _, k := range r.kpa {
		for _, m := range k.moves {
			if in(m.at) {
				n++
			}
		}
	}
	for _, l := range r.lag {
		for _, at := range l.moves {
			if in(at) {
				n++
			}
		}
	}
	return n
}

// implied is the pods the KPA targets' current load levels imply.
func (r *recorder) implied() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.kpa {
		level := k.level
		if len(k.changes) > 0 {
			level = k.changes[len(k.changes)-1].to
		}
		n += int(level)
	}
	return n
}
