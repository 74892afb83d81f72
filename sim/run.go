package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"k8s.io/utils/ptr"

	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/sim/podmodel"
	"github.com/tidalscale/tidal/sim/trace"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Epoch is the virtual start of every replay: a fixed time on the decider's
// 2 s grid, so reports never depend on the clock.
var Epoch = time.Unix(1_700_000_000, 0).UTC()

// Options tune one replay.
type Options struct {
	// Seed seeds every random choice.
	Seed uint64
	// Timeline keeps one Point a second for the plot and the validation.
	Timeline bool
	// NoSkip replays every second and tick even while a KPA target sits
	// idle at zero (see runner.quiet); tests compare the two.
	NoSkip bool
	// KeepAliveState is the predictive keep-alive policy's memory a
	// configuration that uses the policy starts from, as a target's
	// PodAutoscaler status would hand it to the decider
	// (keepalive.State.Encode, its times on the replay's clock, which
	// starts at Epoch); "" starts from nothing.
	KeepAliveState string
}

// Point is the state at one second of a replay.
type Point struct {
	At time.Duration
	// Load is the trace's rate at At (requests or records per second).
	Load float64
	// Observed is the decider's input: the panic-window concurrency (or
	// RPS) for KPA, the total lag for lag.
	Observed float64
	// Desired is the decider's latest desired scale; -1 before the first.
	Desired int32
	// Replicas is the Deployment's replicas, Ready its ready pods.
	Replicas, Ready int32
}

// Result is what one configuration did on one trace (or on many, merged).
type Result struct {
	Config   string
	Strategy string
	// Targets is how many traces were merged in.
	Targets int
	// Duration is the replayed time, summed over the targets.
	Duration time.Duration
	// Arrived counts requests (records) that arrived, Served those served
	// (consumed), Queued those not served by the end (waiting, or in
	// service for a request).
	Arrived, Served, Queued int64
	// Wait is the time from arrival to the start of service (a record's
	// from produce to consume).
	Wait podmodel.Histogram
	// ColdStarts counts the times ready pods went from 0 to more.
	ColdStarts int
	// ColdStartRequests counts the requests that found no warm pod when
	// they arrived (KPA).
	ColdStartRequests int64
	// PodSeconds integrates ready pods over time; IdlePodSeconds the ready
	// pods with no request in them (KPA): the paper's wasted memory time.
	PodSeconds     float64
	IdlePodSeconds float64
	// ColdStartRates holds each target's share of requests that found no
	// warm pod, for targets that had requests (KPA).
	ColdStartRates Rates
	// ScaleEvents counts changes of the Deployment's replicas.
	ScaleEvents int
	// AtZero is the time with the Deployment at 0 replicas.
	AtZero time.Duration
	// Timeline has one Point a second with Options.Timeline.
	Timeline []Point
}

// Merge adds o's totals into r (not its timeline).
func (r *Result) Merge(o *Result) {
	r.Targets += o.Targets
	r.Duration += o.Duration
	r.Arrived += o.Arrived
	r.Served += o.Served
	r.Queued += o.Queued
	r.Wait.Merge(&o.Wait)
	r.ColdStarts += o.ColdStarts
	r.ColdStartRequests += o.ColdStartRequests
	r.PodSeconds += o.PodSeconds
	r.IdlePodSeconds += o.IdlePodSeconds
	r.ColdStartRates.Merge(&o.ColdStartRates)
	r.ScaleEvents += o.ScaleEvents
	r.AtZero += o.AtZero
}

// pod is one pod of the Deployment.
type pod struct {
	name             string
	created, readyAt time.Time
	ready            bool
}

// runner is one replay's state.
type runner struct {
	cfg  *Configuration
	opts Options
	tr   *trace.Trace

	start, end, now time.Time

	eng   *engine.Engine
	tgt   engine.Target
	rev   kpaconfig.Revision
	lagc  lagconfig.Config
	isKPA bool

	// The Deployment.
	replicas int32
	pods     []*pod
	podSeq   int
	ready    int32

	// The actuator's PodAutoscaler: the decision it follows and its status.
	dec           kpaspec.Status
	hasActive     bool
	active        kparules.Condition
	activeSince   time.Time
	initialized   bool
	statusDesired *int32
	requeueAt     time.Time // zero: none

	// The load.
	arrivals *podmodel.Buckets
	model    *podmodel.Model // KPA
	lag      *lagModel       // lag

	// The collector's scrape sample choice.
	rnd     *rand.Rand
	order   []scrape.Pod
	podBuf  []scrape.Pod
	results []scrape.PodStat

	desired int32
	// lastSample is when the decider last got a scraped or pushed stat.
	lastSample time.Time
	lastAcct   time.Time
	res        Result
}

// Run replays tr through cfg (which Check accepted).
func Run(tr *trace.Trace, cfg *Configuration, opts Options) (*Result, error) {
	r, err := newRunner(tr, cfg, opts)
	if err != nil {
		return nil, err
	}
	r.run()
	return &r.res, nil
}

func newRunner(tr *trace.Trace, cfg *Configuration, opts Options) (*runner, error) {
	if tr.Width <= 0 || len(tr.Counts) == 0 {
		return nil, fmt.Errorf("trace %s: empty", tr.Name)
	}
	r := &runner{
		cfg: cfg, opts: opts, tr: tr,
		start: Epoch, end: Epoch.Add(tr.Duration()), now: Epoch, lastAcct: Epoch,
		tgt:     engine.Target{Namespace: "sim", Name: "target"},
		isKPA:   cfg.Strategy != StrategyLag,
		dec:     kpaspec.Status{DesiredScale: kpaspec.ScaleUnknown},
		desired: kpaspec.ScaleUnknown,
		rnd:     rand.New(rand.NewPCG(opts.Seed, 0x5ca1ab1e)),
	}
	r.res.Config, r.res.Strategy, r.res.Targets, r.res.Duration = cfg.Name, cfg.Strategy, 1, tr.Duration()
	kcfg, err := kpaconfig.ParseConfig(cfg.Autoscaler)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: autoscaler: %w", cfg.Name, err)
	}
	r.eng = engine.New(engine.Config{KPA: kcfg, Deployment: kpaconfig.DefaultDeployment(), TickInterval: kpa.TickInterval})
	spec := engine.Spec{Target: r.tgt, Strategy: engine.KPA, Annotations: cfg.Annotations, ContainerConcurrency: cfg.ContainerConcurrency, Reachable: true,
		KeepAliveState: opts.KeepAliveState}
	revAnn := cfg.Annotations
	if !r.isKPA {
		spec.Strategy = engine.Lag
		revAnn = nil
		if r.lagc, err = lagconfig.FromAnnotations(cfg.Annotations); err != nil {
			return nil, fmt.Errorf("configuration %s: %w", cfg.Name, err)
		}
	}
	if r.rev, err = kpaconfig.NewRevision(kcfg, kpaconfig.DefaultDeployment(), revAnn, int64(cfg.ContainerConcurrency), true); err != nil {
		return nil, fmt.Errorf("configuration %s: %w", cfg.Name, err)
	}
	if err := r.eng.Upsert(spec, r.start); err != nil {
		return nil, fmt.Errorf("configuration %s: %w", cfg.Name, err)
	}
	r.arrivals = &podmodel.Buckets{Width: tr.Width, Counts: tr.Counts, Seed: opts.Seed}
	if r.isKPA {
		mc := podmodel.ModelConfig{
			ContainerConcurrency: int(cfg.ContainerConcurrency),
			ServiceTime:          time.Duration(cfg.Pods.ServiceTime),
			ExponentialService:   cfg.Pods.ExponentialService,
			ColdStart:            time.Duration(cfg.Pods.ColdStart),
			Seed:                 opts.Seed,
			BoundedStats:         true,
		}
		if r.model, err = podmodel.NewModel(mc, r.arrivals, r.start); err != nil {
			return nil, fmt.Errorf("configuration %s: pods: %w", cfg.Name, err)
		}
	} else {
		parts := cfg.Partitions
		if parts == 0 {
			parts = max(tr.Partitions, 1)
		}
		r.lag = newLagModel(parts, r.arrivals, r.start, cfg.Pods.RecordsPerSecond)
	}
	initial := int32(1)
	if cfg.InitialReplicas != nil {
		initial = *cfg.InitialReplicas
	}
	r.setReplicas(initial, r.start)
	r.enqueue(r.start) // the PodAutoscaler's first reconcile
	return r, nil
}

// tickEvery is the decider's tick for the target: the 2 s KPA grid, or the
// lag target's own interval.
func (r *runner) tickEvery() time.Duration {
	if r.isKPA {
		return kpa.TickInterval
	}
	return r.lagc.TickInterval
}

func (r *runner) run() {
	nextSec := r.start.Add(time.Second)
	every := r.tickEvery()
	nextTick := r.start.Add(every)
	for r.now.Before(r.end) {
		t := r.end
		for _, c := range []time.Time{nextSec, nextTick, r.nextReady(), r.requeueAt} {
			if !c.IsZero() && c.Before(t) {
				t = c
			}
		}
		r.account(t)
		r.now = t
		r.podsReady(t)
		if !r.requeueAt.IsZero() && !r.requeueAt.After(t) {
			r.requeueAt = time.Time{}
			r.reconcile(t)
		}
		if !nextSec.After(t) {
			r.second(t)
			nextSec = nextSec.Add(time.Second)
		}
		if !nextTick.After(t) {
			if !r.isKPA {
				r.readLag(t)
			}
			for _, d := range r.eng.Tick(t) {
				r.decide(d, t)
			}
			nextTick = nextTick.Add(every)
		}
		if wake, ok := r.quiet(t); ok && wake.After(nextSec) {
			nextSec = gridAtOrAfter(r.start, wake, time.Second)
			nextTick = gridAtOrAfter(r.start, wake, every)
		}
	}
	r.account(r.end)
	r.finish()
}

// quiet reports whether a KPA target sits idle at zero at t, and until
// when: no pods, no replicas, nothing queued or due at the actuator, a
// desired scale of 0, and no stat for longer than every window the decider
// keeps (stable window, scale-down delay, two ticks), so every second and
// tick until the next arrival would do nothing: no scrape, no activator
// stat, and a decider tick over empty windows that repeats 0. The replay
// then jumps to the next arrival's second and tick (or the keep-alive
// policy's pre-warm, when sooner), where the engine
// decides one tick over the same empty windows (it skips missed ticks as a
// live decider does after a pause). TestSkipIdleChangesNothing holds the
// replay with and without the jump to the same result.
func (r *runner) quiet(t time.Time) (time.Time, bool) {
	if !r.isKPA || r.opts.NoSkip || r.opts.Timeline || r.replicas != 0 || len(r.pods) != 0 || !r.requeueAt.IsZero() || r.dec.DesiredScale != 0 {
		return time.Time{}, false
	}
	if queued, _ := r.model.Waiting(); queued > 0 {
		return time.Time{}, false
	}
	if t.Sub(r.lastSample) <= r.rev.StableWindow()+r.rev.ScaleDownDelay()+2*kpa.TickInterval {
		return time.Time{}, false
	}
	wake := r.end
	if at, ok := r.model.NextArrival(); ok && at.Before(wake) {
		wake = at
	}
	// The keep-alive policy pre-warms by the clock, not on an arrival.
	if at, ok := r.eng.NextKeepAlive(r.tgt); ok && at.Before(wake) {
		wake = at
	}
	return wake, true
}

// gridAtOrAfter is the first time start + k·every at or after t.
func gridAtOrAfter(start, t time.Time, every time.Duration) time.Time {
	d := t.Sub(start)
	k := (d + every - 1) / every
	return start.Add(k * every)
}

// nextReady is when the next created pod turns Ready; zero when none is
// starting.
func (r *runner) nextReady() time.Time {
	var next time.Time
	for _, p := range r.pods {
		if !p.ready && (next.IsZero() || p.readyAt.Before(next)) {
			next = p.readyAt
		}
	}
	return next
}

// podsReady turns the pods due by t Ready: the model gets them, the
// collector reports the count, the actuator's pod informer enqueues.
func (r *runner) podsReady(t time.Time) {
	changed := false
	for _, p := range r.pods {
		if p.ready || p.readyAt.After(t) {
			continue
		}
		p.ready = true
		if r.ready == 0 {
			r.res.ColdStarts++
		}
		r.ready++
		changed = true
		if r.model != nil {
			r.model.AddPod(p.name, t)
		}
	}
	if changed {
		r.readyChanged(t)
	}
}

func (r *runner) readyChanged(t time.Time) {
	_, _ = r.eng.Record(r.tgt, engine.Sample{At: t, ReadyPods: r.ready, ReadyOnly: true}, t)
	r.enqueue(t)
}

// enqueue asks for a reconcile at t (a workqueue's AddAfter: the earliest
// wins).
func (r *runner) enqueue(t time.Time) {
	if r.requeueAt.IsZero() || t.Before(r.requeueAt) {
		r.requeueAt = t
	}
}

// second is the collector's one-second work for a KPA target: scrape the
// ready pods, and push an activator stat while requests wait with no warm
// pod.
func (r *runner) second(t time.Time) {
	if !r.isKPA {
		if r.opts.Timeline {
			r.point(t)
		}
		return
	}
	r.model.Advance(t)
	if r.ready > 0 {
		r.scrape(t)
	}
	if queued, warm := r.model.Waiting(); warm == 0 && queued > 0 {
		s := engine.Sample{At: t, Activator: true, ReadyPods: -1, Stat: kpa.Stat{
			AverageConcurrentRequests: float64(queued),
			RequestCount:              r.arrivals.Rate(t.Sub(r.start)),
		}}
		r.lastSample = t
		if poke, _ := r.eng.Record(r.tgt, s, t); poke {
			if d, _, err := r.eng.Poke(r.tgt, t); err == nil {
				r.decide(d, t)
			}
		}
	}
	if r.opts.Timeline {
		r.point(t)
	}
}

// scrape is collector/scrape's measurement: the sample of ready pods it
// reads (Order, SampleSize), their queue-proxy stats, extrapolated to every
// ready pod (Extrapolate).
func (r *runner) scrape(t time.Time) {
	r.podBuf = r.podBuf[:0]
	for _, p := range r.pods {
		if p.ready {
			r.podBuf = append(r.podBuf, scrape.Pod{Name: p.name, Start: p.readyAt})
		}
	}
	var n int
	r.order, n = scrape.Order(r.order[:0], r.podBuf, t, r.rev.StableWindow(), r.rnd)
	r.results = r.results[:0]
	for _, p := range r.order[:n] {
		st, ok := r.model.Stat(p.Name)
		if !ok {
			continue
		}
		r.results = append(r.results, scrape.PodStat{
			Concurrency: st.AverageConcurrentRequests, ProxiedConcurrency: st.AverageProxiedConcurrentRequests,
			Requests: st.RequestCount, ProxiedRequests: st.ProxiedRequestCount,
		})
	}
	if len(r.results) == 0 {
		return
	}
	r.lastSample = t
	_, _ = r.eng.Record(r.tgt, engine.Sample{At: t, ReadyPods: r.ready, Stat: extrapolate(r.results, int(r.ready))}, t)
}

// extrapolate is collector/scrape.Extrapolate's arithmetic (each field is
// the sample's sum / n × ready pods) without the protobuf message it builds
// for the wire, which cost a seventh of a replay's time;
// TestExtrapolateMatchesCollector holds the two to the same numbers.
func extrapolate(results []scrape.PodStat, ready int) kpa.Stat {
	var sum scrape.PodStat
	for _, r := range results {
		sum.Concurrency += r.Concurrency
		sum.ProxiedConcurrency += r.ProxiedConcurrency
		sum.Requests += r.Requests
		sum.ProxiedRequests += r.ProxiedRequests
	}
	n, total := float64(len(results)), float64(ready)
	return kpa.Stat{
		AverageConcurrentRequests:        sum.Concurrency / n * total,
		AverageProxiedConcurrentRequests: sum.ProxiedConcurrency / n * total,
		RequestCount:                     sum.Requests / n * total,
		ProxiedRequestCount:              sum.ProxiedRequests / n * total,
	}
}

// readLag is the collector's read of a lag target's partitions at t.
func (r *runner) readLag(t time.Time) {
	r.lag.advance(t, r.warmConsumers(t))
	_, _ = r.eng.Record(r.tgt, engine.Sample{At: t, ReadyPods: r.ready, Partitions: r.lag.partitions(), PartitionCount: int32(len(r.lag.parts))}, t)
}

// warmConsumers are the ready pods past their cold start, by name.
func (r *runner) warmConsumers(t time.Time) []string {
	var out []string
	cold := time.Duration(r.cfg.Pods.ColdStart)
	for _, p := range r.pods {
		if p.ready && !p.readyAt.Add(cold).After(t) {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

// decide hands a decision to the actuator, as the sender does: the bounded
// desired scale and the excess burst capacity, recorded, then reconciled.
func (r *runner) decide(d engine.Decision, t time.Time) {
	if !d.Valid() {
		return
	}
	r.dec = kpaspec.Status{DesiredScale: d.Bounded(), ExcessBurstCapacity: d.ExcessBurstCapacity, PredictedIdle: d.PredictedIdle()}
	r.desired = d.Desired
	r.reconcile(t)
}

// ownWriteRequeue is the actuator's re-reconcile after its own status write
// changed the Active condition or the desired scale
// (actuator/podautoscaler).
const ownWriteRequeue = time.Millisecond

// reconcile is one actuator reconcile of the PodAutoscaler: the input the
// actuator builds from its caches, actuator/kparules' rules, then the status
// and the Deployment.
func (r *runner) reconcile(t time.Time) {
	active, age := kparules.Condition{Status: kparules.ConditionUnknown}, t.Sub(r.start)
	if r.hasActive {
		active, age = r.active, t.Sub(r.activeSince)
	}
	want := r.dec.DesiredScale
	if r.statusDesired != nil {
		want = *r.statusDesired
	}
	replicas := r.replicas
	in := kparules.Input{
		Revision:               r.rev,
		Reachability:           kparules.Reachable,
		Active:                 active,
		ActiveAge:              age,
		ScaleTargetInitialized: r.initialized,
		ServiceNameSet:         true,
		PriorDesiredScale:      r.statusDesired,
		SKS:                    &kparules.SKS{Mode: kparules.SKSModeFor(want, r.dec.ExcessBurstCapacity), PrivateServiceNameSet: true},
		Replicas:               &replicas,
		ReadyPods:              r.ready,
		Decider:                r.dec,
	}
	var res kparules.Result
	if r.isKPA {
		// tidal has no activator to probe: the probe always succeeds.
		res = kparules.Reconcile(in, func() bool { return true })
	} else {
		res = kparules.ReconcileLag(in)
	}
	prevDesired := r.statusDesired
	if res.DesiredScale >= 0 {
		ds := res.DesiredScale
		r.statusDesired = &ds
	}
	if res.ActiveChanged || !r.hasActive {
		r.active, r.activeSince, r.hasActive = res.Active, t, true
	}
	r.initialized = res.ScaleTargetInitialized
	if len(res.Requeue) > 0 {
		r.enqueue(t.Add(slices.Min(res.Requeue)))
	}
	if res.ActiveChanged || !ptr.Equal(prevDesired, r.statusDesired) {
		r.enqueue(t.Add(ownWriteRequeue))
	}
	if res.Patch != nil {
		r.setReplicas(*res.Patch, t)
	}
}

// setReplicas is a write of the Deployment's replicas and what its
// ReplicaSet does: new pods turn Ready after readyDelay; removed pods are
// the not-ready first, then the most recently ready.
func (r *runner) setReplicas(n int32, t time.Time) {
	if n == r.replicas && t.After(r.start) {
		return
	}
	if t.After(r.start) {
		r.res.ScaleEvents++
	}
	r.replicas = n
	for int32(len(r.pods)) < n {
		r.podSeq++
		r.pods = append(r.pods, &pod{name: fmt.Sprintf("pod-%06d", r.podSeq), created: t, readyAt: t.Add(time.Duration(r.cfg.Pods.ReadyDelay))})
	}
	removedReady := false
	for int32(len(r.pods)) > n {
		victim := 0
		for i, p := range r.pods {
			v := r.pods[victim]
			switch {
			case v.ready && !p.ready:
				victim = i
			case v.ready == p.ready && !p.readyAt.Before(v.readyAt):
				victim = i
			}
		}
		p := r.pods[victim]
		r.pods = slices.Delete(r.pods, victim, victim+1)
		if p.ready {
			r.ready--
			removedReady = true
			if r.model != nil {
				r.model.RemovePod(p.name, t)
			}
		}
	}
	if removedReady {
		r.readyChanged(t)
	}
}

// account integrates the ready pods and the time at zero up to t.
func (r *runner) account(t time.Time) {
	dt := t.Sub(r.lastAcct)
	if dt <= 0 {
		return
	}
	r.res.PodSeconds += float64(r.ready) * dt.Seconds()
	if r.replicas == 0 {
		r.res.AtZero += dt
	}
	r.lastAcct = t
}

func (r *runner) point(t time.Time) {
	p := Point{At: t.Sub(r.start), Load: r.arrivals.Rate(t.Sub(r.start) - time.Nanosecond), Desired: r.desired, Replicas: r.replicas, Ready: r.ready}
	if d, ok := r.eng.Get(r.tgt); ok {
		switch {
		case d.KPA != nil:
			p.Observed = d.KPA.ObservedPanic
		case d.Lag != nil:
			p.Observed = float64(d.Lag.TotalLag)
		}
	}
	r.res.Timeline = append(r.res.Timeline, p)
}

func (r *runner) finish() {
	if r.model != nil {
		r.model.Advance(r.end)
		rep := r.model.Report()
		r.res.Arrived, r.res.Served, r.res.Queued = rep.Arrived, rep.Served, int64(rep.Queued+rep.InService)
		r.res.ColdStartRequests, r.res.IdlePodSeconds = rep.ColdArrivals, rep.IdlePodSeconds
		if rep.Arrived > 0 {
			r.res.ColdStartRates.Add(float64(rep.ColdArrivals) / float64(rep.Arrived))
		}
		w, _ := r.model.Waits()
		r.res.Wait = *w
		return
	}
	r.lag.advance(r.end, r.warmConsumers(r.end))
	r.res.Arrived, r.res.Served = r.lag.produced, r.lag.consumed
	r.res.Queued = r.lag.produced - r.lag.consumed
	r.res.Wait = r.lag.wait
}
