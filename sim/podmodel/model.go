package podmodel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tidalscale/tidal/collector/queuestat"
)

// ModelConfig describes how the simulated service behaves.
type ModelConfig struct {
	// ContainerConcurrency is how many requests one pod serves at once;
	// requests beyond it queue in the pod (as behind Knative's queue-proxy
	// breaker). 0 means no limit.
	ContainerConcurrency int
	// ServiceTime is how long one request takes once a pod starts it, or
	// the mean of that time with ExponentialService.
	ServiceTime time.Duration
	// ExponentialService draws each request's service time from an
	// exponential distribution (seeded by Seed), for realistic latency
	// tails; otherwise every request takes exactly ServiceTime.
	ExponentialService bool
	// ColdStart is how long a pod takes, after it turns Ready, before it
	// serves; requests wait for a warm pod meanwhile.
	ColdStart time.Duration
	// ReportingPeriod is the queue-proxy's reporting period; 0 means 1 s.
	ReportingPeriod time.Duration
	// MaxStep bounds one simulation step, the resolution of arrivals; 0
	// means 10 ms.
	MaxStep time.Duration
	// Poisson makes arrivals a Poisson process with the profile's rate,
	// seeded by Seed, so requests bunch up as real traffic does; otherwise
	// they are evenly spaced and the model is fully deterministic.
	Poisson bool
	Seed    uint64
	// BoundedStats keeps waits and latencies in a Histogram (constant
	// memory, quantiles within 1.6 %) instead of every value (exact
	// quantiles, memory growing with the requests): for day-long replays.
	BoundedStats bool
}

// Validate names the first invalid field.
func (c ModelConfig) Validate() error {
	switch {
	case c.ContainerConcurrency < 0:
		return fmt.Errorf("ContainerConcurrency = %d: want >= 0 (0 means no limit)", c.ContainerConcurrency)
	case c.ServiceTime <= 0:
		return fmt.Errorf("ServiceTime = %s: want > 0", c.ServiceTime)
	case c.ColdStart < 0:
		return fmt.Errorf("ColdStart = %s: want >= 0", c.ColdStart)
	case c.ReportingPeriod < 0:
		return fmt.Errorf("ReportingPeriod = %s: want >= 0", c.ReportingPeriod)
	case c.MaxStep < 0:
		return fmt.Errorf("MaxStep = %s: want >= 0", c.MaxStep)
	}
	return nil
}

// Model is the load model behind the simulated queue-proxies: a pure,
// deterministic simulation stepped by Advance with the time passed in. It is
// not safe for concurrent use; Workload serialises access.
type Model struct {
	cfg     ModelConfig
	profile Profile
	start   time.Time
	// now and every other time below is elapsed since start: comparing and
	// adding int64s is a quarter of the cost of time.Time's methods on the
	// model's hot path.
	now time.Duration
	// carry is the fractional arrival left over from the last step, so a
	// rate of 0.5/s over 10 ms steps still yields one request every 2 s.
	carry float64

	pods map[string]*simPod
	// order lists the pods sorted by name, for deterministic dispatch.
	order []*simPod
	// rr rotates ties between equally loaded pods.
	rr int
	// pending holds the arrival times of requests waiting for any warm pod
	// (the activator's queue at zero pods, or during cold starts).
	pending []time.Duration

	arrived, served int64
	// cold counts arrivals that found no warm pod.
	cold int64
	// idle integrates, in seconds, the pods with nothing in them (in
	// service or queued) up to the last change of any; each such pod's
	// idleSince says since when.
	idle      float64
	waits     []time.Duration
	latencies []time.Duration
	// waitHist and latencyHist replace waits and latencies with BoundedStats.
	waitHist, latencyHist *Histogram
	rng                   *rand.Rand // nil unless Poisson or ExponentialService

	// arrivals is the profile when it is Arrivals; next is its next arrival
	// (elapsed), valid while hasNext.
	arrivals Arrivals
	nextAt   time.Duration
	hasNext  bool
}

// Arrivals is a Profile that gives each arrival's time. A model whose profile
// is Arrivals lands every request at its own time and jumps from event to
// event (an arrival, a completion, a report, a warm-up) rather than stepping
// MaxStep at a time, so quiet stretches cost nothing; Poisson does not apply.
type Arrivals interface {
	Profile
	// Pop returns the next arrival's time since the start, never before the
	// previous one's; ok is false after the last.
	Pop() (at time.Duration, ok bool)
}

// simPod is one pod's queue-proxy: requests in service, requests queued, and
// the accumulators of the current reporting period.
type simPod struct {
	name    string
	addedAt time.Duration
	warmAt  time.Duration
	// finishes holds the requests in service, a min-heap by finish time.
	finishes inService
	// queue holds arrival times of requests waiting for a slot.
	queue []time.Duration

	// Reporting period state: a time-weighted integral of the requests in
	// the pod (in service + queued), as the queue-proxy measures them.
	lastChange time.Duration
	integral   float64 // request·seconds
	// idleSince is when the pod last became empty (nothing in service or
	// queued), while it is.
	idleSince    time.Duration
	periodArrive int
	nextReport   time.Duration
	last         queuestat.Stat
}

func (p *simPod) outstanding() int { return len(p.finishes) + len(p.queue) }

// NewModel returns a model with no pods, starting at start.
func NewModel(cfg ModelConfig, profile Profile, start time.Time) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	if profile == nil {
		return nil, errors.New("model config: nil Profile")
	}
	if cfg.ReportingPeriod == 0 {
		cfg.ReportingPeriod = time.Second
	}
	if cfg.MaxStep == 0 {
		cfg.MaxStep = 10 * time.Millisecond
	}
	m := &Model{cfg: cfg, profile: profile, start: start, pods: map[string]*simPod{}}
	if cfg.Poisson || cfg.ExponentialService {
		m.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	}
	if cfg.BoundedStats {
		m.waitHist, m.latencyHist = &Histogram{}, &Histogram{}
	}
	if a, ok := profile.(Arrivals); ok {
		m.arrivals = a
		m.popArrival()
	}
	return m, nil
}

// AddPod adds a pod that turned Ready at now. It serves after ColdStart and
// reports every ReportingPeriod from now on. Adding a known pod does nothing.
func (m *Model) AddPod(name string, now time.Time) {
	m.Advance(now)
	if _, ok := m.pods[name]; ok {
		return
	}
	p := &simPod{
		name:       name,
		addedAt:    m.now,
		warmAt:     m.now + m.cfg.ColdStart,
		lastChange: m.now,
		idleSince:  m.now,
		nextReport: m.now + m.cfg.ReportingPeriod,
		last:       queuestat.Stat{PodName: name},
	}
	m.pods[name] = p
	i, _ := slices.BinarySearchFunc(m.order, name, func(p *simPod, name string) int { return strings.Compare(p.name, name) })
	m.order = slices.Insert(m.order, i, p)
	m.dispatchPending()
}

// RemovePod takes a pod away at now. Requests it was serving complete (the
// pod drains); requests queued in it go back to the front of the pending
// queue, keeping their arrival times.
func (m *Model) RemovePod(name string, now time.Time) {
	m.Advance(now)
	p, ok := m.pods[name]
	if !ok {
		return
	}
	if p.outstanding() == 0 {
		m.idle += (m.now - p.idleSince).Seconds()
	}
	// Requests in service drain: they complete as if the pod finished them.
	for _, r := range p.finishes {
		m.complete(r)
	}
	m.pending = append(slices.Clone(p.queue), m.pending...)
	delete(m.pods, name)
	m.order = slices.DeleteFunc(m.order, func(q *simPod) bool { return q == p })
	m.dispatchPending()
}

// Pods returns the names of the pods in the model, sorted.
func (m *Model) Pods() []string {
	names := make([]string, len(m.order))
	for i, p := range m.order {
		names[i] = p.name
	}
	return names
}

// Stat returns the pod's last complete report, or an all-zero stat (with
// the pod name) before its first, as the queue-proxy serves.
func (m *Model) Stat(name string) (queuestat.Stat, bool) {
	p, ok := m.pods[name]
	if !ok {
		return queuestat.Stat{}, false
	}
	return p.last, true
}

// Advance runs the simulation up to now. Times before the model's current
// time are ignored.
func (m *Model) Advance(t time.Time) {
	now := t.Sub(m.start)
	if m.arrivals != nil {
		m.advanceEvents(now)
		return
	}
	for m.now < now {
		next := min(m.now+m.cfg.MaxStep, now)
		// Stop exactly at report boundaries and warm-ups inside the step so
		// each report covers exactly one period.
		for _, p := range m.pods {
			if p.nextReport > m.now && p.nextReport < next {
				next = p.nextReport
			}
			if p.warmAt > m.now && p.warmAt < next {
				next = p.warmAt
			}
		}
		m.step(next)
	}
}

// step moves the simulation from m.now to t (at most MaxStep later).
func (m *Model) step(t time.Duration) {
	// Completions inside the step, each starting the next queued request.
	for _, p := range m.pods {
		m.completeUntil(p, t)
	}
	dt := t - m.now
	// Arrivals of the step land at its end, with the rate at its middle.
	rate := m.profile.Rate(m.now + dt/2)
	if rate < 0 || math.IsNaN(rate) {
		rate = 0
	}
	var n int
	if m.rng != nil {
		n = poisson(m.rng, rate*dt.Seconds())
	} else {
		m.carry += rate * dt.Seconds()
		// The epsilon keeps ten steps of 0.1 from summing to 0.999… and
		// losing a request to float rounding.
		n = int(m.carry + 1e-9)
		m.carry = max(m.carry-float64(n), 0)
	}
	m.now = t
	m.dispatchPending()
	for range n {
		m.arrived++
		if !m.dispatch(t) {
			m.cold++
		}
	}
	for _, p := range m.pods {
		if p.nextReport <= t {
			m.report(p)
		}
	}
}

// advanceEvents runs an Arrivals model up to now, one event at a time.
func (m *Model) advanceEvents(now time.Duration) {
	for {
		m.arriveUntil(m.now)
		if m.now >= now {
			return
		}
		next := now
		if m.hasNext && m.nextAt < next {
			next = m.nextAt
		}
		for _, p := range m.order {
			if p.nextReport > m.now && p.nextReport < next {
				next = p.nextReport
			}
			if p.warmAt > m.now && p.warmAt < next {
				next = p.warmAt
			}
			if len(p.finishes) > 0 && p.finishes[0].finish < next {
				next = p.finishes[0].finish
			}
		}
		for _, p := range m.order {
			m.completeUntil(p, next)
		}
		m.now = next
		m.dispatchPending()
		m.arriveUntil(next)
		for _, p := range m.order {
			if p.nextReport <= next {
				m.report(p)
			}
		}
	}
}

// arriveUntil dispatches, at m.now, the arrivals due by t.
func (m *Model) arriveUntil(t time.Duration) {
	for m.hasNext && m.nextAt <= t {
		m.arrived++
		if !m.dispatch(m.nextAt) {
			m.cold++
		}
		m.popArrival()
	}
}

// NextArrival is the time of the next arrival of an Arrivals model; ok is
// false after the last, or for a rate Profile.
func (m *Model) NextArrival() (at time.Time, ok bool) {
	return m.start.Add(m.nextAt), m.arrivals != nil && m.hasNext
}

func (m *Model) popArrival() { m.nextAt, m.hasNext = m.arrivals.Pop() }

// completeUntil finishes p's requests that end by t, in time order.
func (m *Model) completeUntil(p *simPod, t time.Duration) {
	for len(p.finishes) > 0 && p.finishes[0].finish <= t {
		r := p.finishes.pop()
		f := r.finish
		m.complete(r)
		if len(p.queue) > 0 {
			// The next queued request takes the slot the moment it frees;
			// the number of requests in the pod drops by one either way.
			arrival := p.queue[0]
			p.queue = p.queue[1:]
			m.begin(p, arrival, f)
		}
		m.change(p, f, -1)
	}
}

// dispatch sends a request that arrived at the given time to the least
// loaded warm pod, or leaves it pending if there is none; it reports
// whether it found one.
func (m *Model) dispatch(arrival time.Duration) bool {
	p := m.pick()
	if p == nil {
		m.pending = append(m.pending, arrival)
		return false
	}
	p.periodArrive++
	if m.cfg.ContainerConcurrency == 0 || len(p.finishes) < m.cfg.ContainerConcurrency {
		m.begin(p, arrival, m.now)
	} else {
		p.queue = append(p.queue, arrival)
	}
	m.change(p, m.now, +1)
	return true
}

func (m *Model) dispatchPending() {
	for len(m.pending) > 0 && m.pick() != nil {
		arrival := m.pending[0]
		m.pending = m.pending[1:]
		m.dispatch(arrival)
	}
}

// pick returns the warm pod with the fewest requests in it, rotating between
// ties, or nil if no pod is warm.
func (m *Model) pick() *simPod {
	var best *simPod
	for i := range m.order {
		p := m.order[(m.rr+i)%len(m.order)]
		if p.warmAt > m.now {
			continue
		}
		if best == nil || p.outstanding() < best.outstanding() {
			best = p
		}
	}
	if best != nil {
		m.rr++
	}
	return best
}

// begin starts serving a request at t in p.
func (m *Model) begin(p *simPod, arrival, t time.Duration) {
	if m.waitHist != nil {
		m.waitHist.Add(t - arrival)
	} else {
		m.waits = append(m.waits, t-arrival)
	}
	service := m.cfg.ServiceTime
	if m.cfg.ExponentialService {
		service = time.Duration(m.rng.ExpFloat64() * float64(service))
	}
	p.finishes.push(request{arrival: arrival, finish: t + service})
}

// complete records a finished request.
func (m *Model) complete(r request) {
	m.served++
	if m.latencyHist != nil {
		m.latencyHist.Add(r.finish - r.arrival)
	} else {
		m.latencies = append(m.latencies, r.finish-r.arrival)
	}
}

// request is one request in service.
type request struct{ arrival, finish time.Duration }

// inService is a min-heap of requests by finish time, typed so that a push
// or a pop boxes nothing (this is the model's hottest path).
type inService []request

func (h *inService) push(r request) {
	*h = append(*h, r)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[i].finish >= q[parent].finish {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *inService) pop() request {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q[l].finish < q[small].finish {
			small = l
		}
		if r := l + 1; r < len(q) && q[r].finish < q[small].finish {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// change records that the number of requests in p changes by delta at t.
// It must be called after the lists changed, with the count before it
// derived from them.
func (m *Model) change(p *simPod, t time.Duration, delta int) {
	after := p.outstanding()
	before := after - delta
	p.integral += float64(before) * (t - p.lastChange).Seconds()
	p.lastChange = t
	switch {
	case before == 0 && after > 0:
		m.idle += (t - p.idleSince).Seconds()
	case before > 0 && after == 0:
		p.idleSince = t
	}
}

// report closes p's reporting period at p.nextReport.
func (m *Model) report(p *simPod) {
	end := p.nextReport
	p.integral += float64(p.outstanding()) * (end - p.lastChange).Seconds()
	p.lastChange = end
	period := m.cfg.ReportingPeriod.Seconds()
	p.last = queuestat.Stat{
		PodName:                   p.name,
		AverageConcurrentRequests: p.integral / period,
		RequestCount:              float64(p.periodArrive) / period,
		ProcessUptime:             (end - p.addedAt).Seconds(),
		Timestamp:                 m.start.Add(end).Unix(),
	}
	p.integral, p.periodArrive = 0, 0
	p.nextReport = end + m.cfg.ReportingPeriod
}

// Report is what users of the simulated service would have felt so far.
type Report struct {
	// Arrived counts requests that arrived; Served those that completed.
	Arrived, Served int64
	// InService is the number of requests being served now; Queued those
	// waiting, in pods or for a warm pod.
	InService, Queued int
	// Pods is the number of ready pods, WarmPods those past their cold start.
	Pods, WarmPods int
	// ColdArrivals counts the requests that found no warm pod when they
	// arrived: a cold start, or a wait for one.
	ColdArrivals int64
	// IdlePodSeconds integrates the ready pods with nothing in them (no
	// request in service or queued in the pod): what keeping pods warm
	// cost while they did no work, the paper's wasted memory time.
	IdlePodSeconds float64
	// Wait summarises the time from arrival to the start of service of
	// every request that started.
	Wait WaitStats
	// Latency summarises the time from arrival to completion of every
	// request served.
	Latency WaitStats
}

// WaitStats summarises a set of durations.
type WaitStats struct {
	Count                    int
	Mean, P50, P90, P99, Max time.Duration
}

// Waiting returns, at the model's current time, the requests waiting (for
// a warm pod, or in a pod's queue) and the warm pods: what an activator
// sees, without Report's summaries.
func (m *Model) Waiting() (queued, warm int) {
	queued = len(m.pending)
	for _, p := range m.order {
		queued += len(p.queue)
		if p.warmAt <= m.now {
			warm++
		}
	}
	return queued, warm
}

// Waits returns the histograms of waits and latencies of a model with
// BoundedStats (nil otherwise), for merging across models.
func (m *Model) Waits() (wait, latency *Histogram) { return m.waitHist, m.latencyHist }

// Report summarises the run so far.
func (m *Model) Report() Report {
	r := Report{Arrived: m.arrived, Served: m.served, Queued: len(m.pending), Pods: len(m.pods), ColdArrivals: m.cold, IdlePodSeconds: m.idle}
	for _, p := range m.pods {
		r.InService += len(p.finishes)
		r.Queued += len(p.queue)
		if p.warmAt <= m.now {
			r.WarmPods++
		}
		if p.outstanding() == 0 {
			r.IdlePodSeconds += (m.now - p.idleSince).Seconds()
		}
	}
	if m.waitHist != nil {
		r.Wait, r.Latency = m.waitHist.Stats(), m.latencyHist.Stats()
	} else {
		r.Wait = summarise(m.waits)
		r.Latency = summarise(m.latencies)
	}
	return r
}

func summarise(waits []time.Duration) WaitStats {
	if len(waits) == 0 {
		return WaitStats{}
	}
	s := slices.Clone(waits)
	slices.Sort(s)
	var sum time.Duration
	for _, w := range s {
		sum += w
	}
	q := func(p float64) time.Duration {
		// Nearest rank: the smallest wait with at least p of all at or below.
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return WaitStats{
		Count: len(s), Mean: sum / time.Duration(len(s)),
		P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: s[len(s)-1],
	}
}

// poisson draws from a Poisson distribution with mean lambda: Knuth's
// product of uniforms for small means, a rounded normal approximation for
// large ones (where the two agree closely).
func poisson(rng *rand.Rand, lambda float64) int {
	switch {
	case lambda <= 0:
		return 0
	case lambda < 30:
		limit, k, p := math.Exp(-lambda), 0, rng.Float64()
		for p > limit {
			k++
			p *= rng.Float64()
		}
		return k
	default:
		return max(int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())), 0)
	}
}
