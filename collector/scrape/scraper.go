package scrape

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Config tunes a Scraper.
type Config struct {
	// Interval is the scrape cadence (Knative's scrapeTickInterval, 1 s).
	Interval time.Duration
	// Timeout bounds one pod's request (Knative's 3 s).
	Timeout time.Duration
	// Workers bounds the requests in flight across all targets.
	Workers int
	// MaxTextBody caps a Prometheus text body; the protobuf Stat is always
	// capped at queuestat.MaxSize.
	MaxTextBody int
	// IdleConnTimeout closes a pod's kept-alive connection after this long
	// unused.
	IdleConnTimeout time.Duration
	// MaxIdleConns bounds the kept-alive connections, one per pod at most
	// and never more than half the open-file limit; pods beyond it are
	// dialed for every scrape.
	MaxIdleConns int
}

// RegisterFlagsWithPrefix registers the scraper's flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.DurationVar(&c.Interval, p+"interval", time.Second, "How often every KPA target is scraped (Knative: 1s).")
	fs.DurationVar(&c.Timeout, p+"timeout", 3*time.Second, "Timeout of one pod's metrics request (Knative: 3s).")
	fs.IntVar(&c.Workers, p+"workers", 1024, "Pod requests in flight at most, across all targets. A round of every pod must end within --scrape-interval, so it needs about pods × a request's latency in flight: 10,000 pods answering in 36 ms take 360 (a worker costs about 16 KiB).")
	fs.IntVar(&c.MaxTextBody, p+"max-text-body", 64<<10, "Largest Prometheus text body read from a pod, in bytes.")
	fs.DurationVar(&c.IdleConnTimeout, p+"idle-conn-timeout", 90*time.Second, "How long an unused pod connection is kept alive.")
	fs.IntVar(&c.MaxIdleConns, p+"max-idle-conns", 32768, "Pod connections kept alive between scrapes at most, one per pod, and at most half the open-file limit; 0 dials for every scrape, which costs about three times the CPU. Each costs a file descriptor, no goroutine.")
}

// Validate refuses unusable values, naming the flag.
func (c *Config) Validate(p string) error {
	switch {
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("--%sinterval %s: want at least 10ms", p, c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("--%stimeout %s: want more than 0", p, c.Timeout)
	case c.Workers < 1 || c.Workers > 100000:
		return fmt.Errorf("--%sworkers %d: want 1 to 100000", p, c.Workers)
	case c.MaxTextBody < 512:
		return fmt.Errorf("--%smax-text-body %d: want at least 512", p, c.MaxTextBody)
	case c.IdleConnTimeout <= 0:
		return fmt.Errorf("--%sidle-conn-timeout %s: want more than 0", p, c.IdleConnTimeout)
	case c.MaxIdleConns < 0 || c.MaxIdleConns > 1<<20:
		return fmt.Errorf("--%smax-idle-conns %d: want 0 to %d", p, c.MaxIdleConns, 1<<20)
	}
	return nil
}

// PodSource lists a target's ready pods: Running, Ready and not deleting.
type PodSource interface {
	// ReadyPods appends the ready pods to dst.
	ReadyPods(dst []Pod) []Pod
	// IsReady reports whether the named pod is still ready.
	IsReady(name string) bool
}

// Mesh is how a target with a Service is scraped when a service mesh may
// stand between the collector and its pods: Knative's config-network
// mesh-compatibility-mode.
type Mesh uint8

const (
	// MeshAuto scrapes the pods directly; when a scrape finds every pod
	// refusing as a mesh's proxy does (502 or 503) and none failing
	// otherwise, the same scrape goes on through the Service, and once it
	// succeeds there every later scrape does (Knative's auto).
	MeshAuto Mesh = iota
	// MeshDisabled always scrapes the pods directly.
	MeshDisabled
	// MeshEnabled always scrapes through the Service.
	MeshEnabled
)

// Target is a request-driven target to scrape.
type Target struct {
	Ref *commonv1.TargetRef
	// Path is the metrics path on each pod (Knative: /metrics).
	Path   string
	Format Format
	// StableWindow splits old pods from young ones.
	StableWindow time.Duration
	Pods         PodSource
	// Service is host:port of a Service in front of the pods' metrics port
	// (a Knative revision's private Service, port 9090), or empty: the pods
	// are then always scraped directly, whatever Mesh says.
	Service string
	Mesh    Mesh
	// PodHost, when set, is the Host of every direct pod request, sent with
	// Knative-Direct-Lb: true (config-network's
	// enable-mesh-pod-addressability: the mesh passes such a request
	// through to the pod); MeshAuto then never falls back to the Service,
	// as Knative's scraper does not.
	PodHost string
	// Duration, if set, also observes each scrape's seconds, from its
	// start to its sample or failure (a scrape of no ready pods is none).
	Duration prometheus.Observer
}

// serviceTries is how often one place of a sample is tried through the
// Service before it counts as failed (Knative's scraperMaxRetries).
const serviceTries = 10

// Failure is one failed measurement, as the hub keeps it.
type Failure = dispatch.Failure

// Recorder receives the outcome of every scrape (the collector's hub).
type Recorder interface {
	// Record takes a scrape's sample and keeps it; false if the target
	// is no longer known.
	Record(ref *commonv1.TargetRef, s *commonv1.MetricSample) bool
	// Failed reports a pod that could not be read, or (Pod empty) a scrape
	// that recorded nothing.
	Failed(ref *commonv1.TargetRef, f Failure)
	// CompleteBefore says that every sample stamped before t has been
	// passed to Record: t is the start of the earliest round with a scrape
	// still running, or of the next round. It only grows.
	CompleteBefore(t time.Time)
}

// Scraper scrapes every target once per interval.
type Scraper struct {
	cfg     Config
	client  *client
	rec     Recorder
	metrics *Metrics
	log     *zap.Logger
	limit   *logkey.Limiter
	now     func() time.Time
	// jobs holds one entry per place of a running scrape's sample.
	jobs chan *target

	// mu guards targets and order, the same targets in the order they
	// came: each round scrapes them in it, so a target's scrapes start an
	// interval apart even when a round runs long (in a random order, one
	// scraped last and then first would start its next scrape while the
	// last still ran, and miss a second).
	mu      sync.RWMutex
	targets map[string]*target
	order   []*target

	// roundMu guards rounds (those with a scrape still running, oldest
	// first), next (when the next round will start) and before (the last
	// CompleteBefore given), which rounds and next bound: the decider
	// ticks once no sample before its grid time can come.
	roundMu sync.Mutex
	rounds  []*round
	next    time.Time
	before  time.Time
}

// round is one scrape round: its stamp and its scrapes still running, plus
// one while scrapeAll is starting them.
type round struct {
	at      time.Time
	running int
}

// target is one target's scrape state. One scrape at a time runs per
// target: busy is set while it does.
type target struct {
	// spec is the latest spec; cur is the one the running scrape uses.
	spec atomic.Pointer[Target]
	cur  Target
	busy atomic.Bool
	done func()
	// round is the round the running scrape belongs to.
	round *round
	// req is the GET of cur, built for the spec reqFor; svcReq the same
	// through the Service, closing its connection.
	req    request
	svcReq request
	reqFor *Target

	// viaService is set once MeshAuto found the pods out of reach and the
	// Service answering: every later scrape goes through it (Knative's
	// podsAddressable false). service is set while the running scrape goes
	// through the Service, only used between begin and the scrape's end.
	viaService atomic.Bool
	service    bool
	// meshRefused and nonMesh are set when a pod of the running scrape
	// refused as a mesh's proxy does, or failed otherwise.
	meshRefused atomic.Bool
	nonMesh     atomic.Bool
	// svcMu guards seen (the pods read through the Service in the running
	// scrape) and young (their stats from pods younger than the stable
	// window, kept in case too few old ones answer).
	svcMu sync.Mutex
	seen  map[string]bool
	young []PodStat

	// Set up by start, read by the slot workers, finished by the last one.
	// at is the round's tick, the sample's time: one sample a second
	// however late each scrape ends. (Stamped at its end, as Knative does,
	// a late scrape lands two samples in one second's bucket and none in
	// the next, and a window reads high.)
	at, start time.Time
	pods      []Pod
	order     []Pod
	n         int
	next      atomic.Int32
	ok        atomic.Int32
	pending   atomic.Int32
	short     atomic.Bool
	results   []PodStat
	rnd       *rand.Rand
	counterM  sync.Mutex
	counters  map[string]counterReading
}

type counterReading struct {
	at time.Time
	v  float64
}

// New returns a Scraper; it scrapes nothing until Run.
func New(cfg Config, rec Recorder, m *Metrics, log *zap.Logger) *Scraper {
	return newScraper(cfg, rec, m, log, time.Now)
}

func newScraper(cfg Config, rec Recorder, m *Metrics, log *zap.Logger, now func() time.Time) *Scraper {
	// Kept connections leave half the process's file descriptors to the
	// rest: a dial that finds none left fails its pod.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(2*cfg.MaxIdleConns) {
		log.Info("fewer pod connections kept alive than asked: half the open-file limit",
			zap.Int("asked", cfg.MaxIdleConns), zap.Uint64("kept", lim.Cur/2), zap.Uint64("open_file_limit", lim.Cur))
		cfg.MaxIdleConns = int(lim.Cur / 2)
	}
	return &Scraper{
		cfg:     cfg,
		client:  newClient(cfg),
		rec:     rec,
		metrics: m,
		log:     log,
		limit:   logkey.NewLimiter(time.Minute),
		now:     now,
		jobs:    make(chan *target, 4*cfg.Workers),
		targets: map[string]*target{},
	}
}

// Set adds or replaces a target; a scrape in flight finishes with the old spec.
func (s *Scraper) Set(t Target) {
	key := t.Ref.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.targets[key]; ok {
		old.spec.Store(&t) // the next scrape uses it
		return
	}
	nt := &target{
		rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	nt.spec.Store(&t)
	s.targets[key] = nt
	s.order = append(s.order, nt)
	s.metrics.targets.Set(float64(len(s.targets)))
}

// Remove forgets a target.
func (s *Scraper) Remove(ref *commonv1.TargetRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.targets[ref.Key()]; ok {
		s.order = slices.DeleteFunc(s.order, func(o *target) bool { return o == t })
	}
	delete(s.targets, ref.Key())
	s.metrics.targets.Set(float64(len(s.targets)))
}

// Len is the number of targets.
func (s *Scraper) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.targets)
}

// roundOffset is how long after each whole interval a round is due. Its
// samples, stamped then, belong to the tick after that second, so a tick
// on a whole second never waits for the round that starts there.
const roundOffset = 10 * time.Millisecond

// maxRoundLateness bounds, in intervals, how late a scrape round may
// start: later, its samples would come after the decider's ticks that need
// them.
const maxRoundLateness = 3

// Run starts the workers and scrapes every interval until ctx ends.
func (s *Scraper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(context.Background())
	for range s.cfg.Workers {
		wg.Go(func() { s.work(wctx) })
	}
	defer func() {
		cancel()
		wg.Wait()
		s.client.closeIdle()
		s.metrics.idleConns.Set(0)
	}()
	// Rounds are due an interval apart, just after each whole interval
	// (roundOffset): a round then has nearly the whole interval to end
	// before the next whole second, where the decider's tick need not wait
	// for it; at an arbitrary offset a round begun just before a tick's
	// grid time held that tick until it ended. One that starts late (the
	// last one's jobs still queued) runs at once, stamped with its due
	// time, so each target still has a sample a second: a ticker would
	// drop it, and every target would miss that second, which a window
	// then counts as zero. A round more than maxRoundLateness late is
	// lost, not run.
	due := time.Now().Truncate(s.cfg.Interval).Add(s.cfg.Interval + roundOffset)
	timer := time.NewTimer(time.Until(due))
	defer timer.Stop()
	swept := due
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		s.scrapeAll(ctx, due, nil)
		// Stale connections live at most 1.5 idle timeouts (or an
		// interval more), and no goroutine waits for them.
		if due.Sub(swept) >= s.cfg.IdleConnTimeout/2 {
			swept = due
			s.metrics.idleConns.Set(float64(s.client.sweep(due)))
		}
		due = due.Add(s.cfg.Interval)
		for time.Since(due) > maxRoundLateness*s.cfg.Interval {
			s.metrics.lostRounds.Inc()
			due = due.Add(s.cfg.Interval)
		}
		s.roundMu.Lock()
		s.next = due
		s.advanceLocked()
		s.roundMu.Unlock()
		timer.Reset(time.Until(due))
	}
}

// ScrapeNow starts a scrape of every idle target and waits until they end.
// Run must be running. Its samples are stamped now, which CompleteBefore
// may have passed already: it is for tests.
func (s *Scraper) ScrapeNow(ctx context.Context) {
	var wg sync.WaitGroup
	s.scrapeAll(ctx, s.now(), &wg)
	wg.Wait()
}

// scrapeAll starts a scrape of every idle target for the round at: the
// time its samples are recorded at.
func (s *Scraper) scrapeAll(ctx context.Context, at time.Time, wg *sync.WaitGroup) {
	s.mu.RLock()
	ts := slices.Clone(s.order)
	s.mu.RUnlock()
	r := &round{at: at, running: 1}
	s.roundMu.Lock()
	s.rounds = append(s.rounds, r)
	s.roundMu.Unlock()
	defer s.roundDone(r)
	for _, t := range ts {
		if !t.busy.CompareAndSwap(false, true) {
			s.metrics.skipped.Inc() // the last scrape still waits on a slow pod
			continue
		}
		if wg != nil {
			wg.Add(1)
			t.done = wg.Done
		} else {
			t.done = nil
		}
		s.roundMu.Lock()
		r.running++
		s.roundMu.Unlock()
		t.round = r
		if !s.begin(t, at) {
			continue
		}
		for i := range t.n {
			select {
			case s.jobs <- t:
			case <-ctx.Done():
				// Slots never queued count as failed, so the scrape ends
				// once the queued ones do.
				for range t.n - i {
					s.slotDone(t, false, nil)
				}
				return
			}
		}
	}
}

// begin prepares t's scrape for the round at; false means it already ended
// (no pods).
func (s *Scraper) begin(t *target, at time.Time) bool {
	spec := t.spec.Load()
	t.cur = *spec
	if t.reqFor != spec {
		t.req, t.svcReq, t.reqFor = newRequest(spec.Path, spec.Format, false), newRequest(spec.Path, spec.Format, true), spec
		if spec.PodHost != "" {
			t.req = t.req.directLB(spec.PodHost)
		}
	}
	switch {
	case spec.Service == "" || spec.Mesh == MeshDisabled:
		t.service = false
	case spec.Mesh == MeshEnabled:
		t.service = true
	default:
		t.service = t.viaService.Load()
	}
	t.meshRefused.Store(false)
	t.nonMesh.Store(false)
	t.at, t.start = at, s.now()
	t.pods = t.cur.Pods.ReadyPods(t.pods[:0])
	if len(t.pods) == 0 {
		// No ready pods: nothing is recorded (Knative records nothing
		// either); the decider sees the gap.
		s.end(t)
		return false
	}
	t.forgetCounters()
	if t.service {
		t.serviceSample()
	} else {
		t.order, t.n = Order(t.order[:0], t.pods, t.start, t.cur.StableWindow, t.rnd)
		t.resetSlots()
	}
	return true
}

// forgetCounters drops the counter readings of pods no longer ready, so
// the readings stay bounded by the pods a target has as pods come and go.
// A pod that turns ready again starts over from a first reading.
func (t *target) forgetCounters() {
	t.counterM.Lock()
	defer t.counterM.Unlock()
	if len(t.counters) <= len(t.pods) {
		return
	}
	ready := make(map[string]bool, len(t.pods)+1)
	ready[t.cur.Service] = true // the key of readings through the Service
	for _, p := range t.pods {
		ready[p.Name] = true
	}
	for pod := range t.counters {
		if !ready[pod] {
			delete(t.counters, pod)
		}
	}
}

// serviceSample sets up a sample of the ready pods read through the Service.
func (t *target) serviceSample() {
	t.n = SampleSize(len(t.pods))
	clear(t.seen)
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	t.young = t.young[:0]
	t.resetSlots()
}

// resetSlots readies t.n places of the sample.
func (t *target) resetSlots() {
	if cap(t.results) < t.n {
		t.results = make([]PodStat, t.n)
	}
	t.results = t.results[:t.n]
	t.next.Store(0)
	t.ok.Store(0)
	t.short.Store(false)
	t.pending.Store(int32(t.n))
}

func (s *Scraper) end(t *target) {
	done, r := t.done, t.round
	t.round = nil
	t.busy.Store(false)
	if done != nil {
		done()
	}
	s.roundDone(r)
}

// roundDone ends one scrape of r, or r's start.
func (s *Scraper) roundDone(r *round) {
	if r == nil {
		return
	}
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	r.running--
	s.advanceLocked()
}

// advanceLocked drops the ended rounds and tells the recorder
// when no sample before a later time can come any more. The call is made
// under roundMu so that the times it gives only grow.
func (s *Scraper) advanceLocked() {
	s.rounds = slices.DeleteFunc(s.rounds, func(r *round) bool { return r.running == 0 })
	before := s.next
	for _, r := range s.rounds {
		if before.IsZero() || r.at.Before(before) {
			before = r.at
		}
	}
	if before.After(s.before) {
		s.before = before
		s.rec.CompleteBefore(before)
	}
}

func (s *Scraper) work(ctx context.Context) {
	x := newExchange()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-s.jobs:
			s.slot(t, x)
		}
	}
}

// slot fills one place of the sample: it tries the next untried pod until
// one answers or none is left.
func (s *Scraper) slot(t *target, x *exchange) {
	if t.service {
		s.serviceSlot(t, x)
		return
	}
	for {
		i := int(t.next.Add(1)) - 1
		if i >= len(t.order) {
			s.slotDone(t, false, x)
			return
		}
		p := t.order[i]
		st, err := s.read(t, x, p.Addr, t.req, p.Name)
		if err != nil {
			s.podFailed(t, p, err)
			continue
		}
		s.metrics.pods.Inc()
		t.results[int(t.ok.Add(1))-1] = st
		s.slotDone(t, true, x)
		return
	}
}

// serviceSlot fills one place of the sample through the target's Service,
// as Knative's scrapeService does where a mesh keeps the pods from being
// reached directly: each try is a new connection, so the Service picks a
// pod anew; a pod already read in this scrape is tried again; a pod younger
// than the stable window is kept aside and used only if too few old ones
// answer; after serviceTries the place counts as failed.
func (s *Scraper) serviceSlot(t *target, x *exchange) {
	for range serviceTries {
		// A Service hides which pod answered: a gauge reads as it is, a
		// counter has no per-pod rate.
		st, err := s.read(t, x, t.cur.Service, t.svcReq, t.cur.Service)
		if err != nil {
			fe := asFetchError(err)
			s.metrics.failures.WithLabelValues(fe.reason).Inc()
			if s.limit.Allow(t.cur.Ref.Key()+" via "+t.cur.Service, s.now()) {
				s.log.Warn("scrape through the Service failed", logkey.Target(t.cur.Ref.Key()), zap.String("service", t.cur.Service), logkey.Reason(fe.reason), zap.Error(fe.err))
			}
			continue
		}
		t.svcMu.Lock()
		dup := t.seen[st.Pod]
		t.seen[st.Pod] = true
		old := st.Uptime >= t.cur.StableWindow.Seconds()
		if !dup && !old && len(t.young) < t.n {
			t.young = append(t.young, st)
		}
		t.svcMu.Unlock()
		if dup {
			continue
		}
		s.metrics.pods.Inc()
		if old {
			t.results[int(t.ok.Add(1))-1] = st
			s.slotDone(t, true, x)
			return
		}
	}
	s.slotDone(t, false, x)
}

// read fetches one pod's stat from addr; a text value's counter is kept
// under pod.
func (s *Scraper) read(t *target, x *exchange, addr string, req request, pod string) (PodStat, error) {
	began := time.Now()
	st, raw, err := fetch(s.client, x, addr, req, t.cur.Format, s.cfg.Timeout)
	s.metrics.podLatency.Observe(time.Since(began).Seconds())
	if x.dials > 0 {
		s.metrics.dials.Add(float64(x.dials))
		x.dials = 0
	}
	if err == nil && t.cur.Format.Kind == FormatText {
		st, err = t.textStat(pod, raw, s.now())
	}
	return st, err
}

func (t *target) textStat(pod string, v float64, now time.Time) (PodStat, error) {
	f := t.cur.Format
	if f.Counter {
		t.counterM.Lock()
		prev, ok := t.counters[pod]
		if t.counters == nil {
			t.counters = map[string]counterReading{} // only counter targets pay for it
		}
		t.counters[pod] = counterReading{at: now, v: v}
		t.counterM.Unlock()
		switch {
		case !ok:
			return PodStat{}, failf(ReasonCounter, "%s: first reading, no rate yet", f.Metric)
		case v < prev.v:
			return PodStat{}, failf(ReasonCounter, "%s: reset from %v to %v", f.Metric, prev.v, v)
		case !now.After(prev.at):
			return PodStat{}, failf(ReasonCounter, "%s: no time since the last reading", f.Metric)
		}
		v = (v - prev.v) / now.Sub(prev.at).Seconds()
	}
	if f.RPS {
		return PodStat{Requests: v}, nil
	}
	return PodStat{Concurrency: v}, nil
}

func (s *Scraper) podFailed(t *target, p Pod, err error) {
	fe := asFetchError(err)
	reason := fe.reason
	if fe.mesh {
		t.meshRefused.Store(true)
	} else {
		t.nonMesh.Store(true)
	}
	if (reason == ReasonConnect || reason == ReasonTimeout) && !t.cur.Pods.IsReady(p.Name) {
		reason = ReasonVanished
	}
	s.metrics.failures.WithLabelValues(reason).Inc()
	now := s.now()
	s.rec.Failed(t.cur.Ref, Failure{Time: now, Pod: p.Name, Reason: reason, Message: fe.err.Error()})
	if s.limit.Allow(t.cur.Ref.GetNamespace()+"/"+p.Name, now) {
		s.log.Warn("pod scrape failed", logkey.Target(t.cur.Ref.Key()), logkey.Pod(p.Name), logkey.Reason(reason), zap.Error(fe.err))
	}
}

// slotDone ends one slot; the last one ends the scrape, or, under
// MeshAuto, turns it to the Service. x is the calling worker's exchange, nil
// when the scrape is being abandoned.
func (s *Scraper) slotDone(t *target, ok bool, x *exchange) {
	if !ok {
		t.short.Store(true)
	}
	if t.pending.Add(-1) != 0 {
		return
	}
	if x != nil && s.fallBack(t, x) {
		return
	}
	now := s.now()
	took := now.Sub(t.start).Seconds()
	s.metrics.latency.Observe(took)
	if t.cur.Duration != nil {
		t.cur.Duration.Observe(took)
	}
	if t.service {
		// Young pods fill the places old ones left (Knative).
		ok := int(t.ok.Load())
		fill := min(t.n-ok, len(t.young))
		copy(t.results[ok:], t.young[:fill])
		t.ok.Store(int32(ok + fill))
		t.short.Store(ok+fill < t.n)
		if t.cur.Mesh == MeshAuto && !t.short.Load() && !t.viaService.Swap(true) {
			s.log.Info("direct pod scraping off, scraping through the Service: every pod refused as a mesh's proxy does",
				logkey.Target(t.cur.Ref.Key()), zap.String("service", t.cur.Service))
		}
	}
	if t.short.Load() {
		// The sample could not be filled: the whole scrape fails and nothing
		// is recorded, even for the pods that answered (Knative).
		s.metrics.failures.WithLabelValues(ReasonSample).Inc()
		s.rec.Failed(t.cur.Ref, Failure{Time: now, Reason: ReasonSample,
			Message: fmt.Sprintf("%d of %d sampled pods answered out of %d ready", t.ok.Load(), t.n, len(t.pods))})
		s.end(t)
		return
	}
	s.rec.Record(t.cur.Ref, Extrapolate(t.results, len(t.pods), t.at))
	s.end(t)
}

// fallBack applies MeshAuto's rule at the end of a direct scrape: when no
// pod answered, some refused as a mesh's proxy does and none failed
// otherwise, the same scrape samples the pods again through the Service
// (Knative's scraper falls back within one Scrape, and goes on trying the
// pods first until the Service has answered once). It reports whether the
// scrape goes on. The places that find no room in the job queue are filled
// by the calling worker, so a full queue delays the fallback but never
// blocks a worker on it.
func (s *Scraper) fallBack(t *target, x *exchange) bool {
	if t.service || t.cur.Service == "" || t.cur.Mesh != MeshAuto || t.cur.PodHost != "" ||
		t.ok.Load() != 0 || !t.meshRefused.Load() || t.nonMesh.Load() {
		return false
	}
	if s.limit.Allow(t.cur.Ref.Key()+" fallback", s.now()) {
		s.log.Warn("no pod scraped directly, every one refused as a mesh's proxy does: trying the Service",
			logkey.Target(t.cur.Ref.Key()), zap.Int("pods", len(t.pods)), zap.String("service", t.cur.Service))
	}
	t.service = true
	t.serviceSample()
	inline := 0
	for range t.n {
		select {
		case s.jobs <- t:
		default:
			inline++
		}
	}
	// t may be another scrape's once the last place is done: only the
	// count is read from here on.
	for range inline {
		s.serviceSlot(t, x)
	}
	return true
}

// Extrapolate sums the sampled pods' readings and scales them to all ready
// pods: each field is sum / n × N, the scraper's assumption that load is
// spread evenly (Knative's computeAverages). The sample is stamped with the
// time the scrape finished.
func Extrapolate(results []PodStat, ready int, at time.Time) *commonv1.MetricSample {
	var sum PodStat
	for _, r := range results {
		sum.Concurrency += r.Concurrency
		sum.ProxiedConcurrency += r.ProxiedConcurrency
		sum.Requests += r.Requests
		sum.ProxiedRequests += r.ProxiedRequests
	}
	n, total := float64(len(results)), float64(ready)
	readyPods := int32(ready)
	return &commonv1.MetricSample{
		Time:                      timestamppb.New(at),
		Source:                    commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE,
		AverageConcurrency:        sum.Concurrency / n * total,
		AverageProxiedConcurrency: sum.ProxiedConcurrency / n * total,
		RequestCount:              sum.Requests / n * total,
		ProxiedRequestCount:       sum.ProxiedRequests / n * total,
		ReadyPods:                 &readyPods,
	}
}
