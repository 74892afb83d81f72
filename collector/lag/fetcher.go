package lag

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Error reasons, the values of the reason label of
// tidal_collector_lag_fetch_errors_total.
const (
	ReasonBroker = "broker" // the cluster could not be reached or answered with an error
	ReasonTopic  = "topic"  // the topic does not exist, or a partition could not be read
	ReasonGroup  = "group"  // the consumer group's offsets could not be read
	ReasonConfig = "config" // the target's cluster settings are unusable
)

// Config tunes a Fetcher.
type Config struct {
	// Tick is how often the fetcher looks for due targets; each target is
	// fetched at its own interval, rounded up to a tick.
	Tick time.Duration
	// Timeout bounds one cluster's fetch.
	Timeout time.Duration
}

// RegisterFlagsWithPrefix registers the fetcher's flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.DurationVar(&c.Tick, p+"tick", 100*time.Millisecond, "How often due lag targets are fetched; a target's own interval (riff: 100ms, KEDA: pollingInterval) is rounded up to it.")
	fs.DurationVar(&c.Timeout, p+"timeout", 5*time.Second, "Timeout of one Kafka cluster's lag fetch.")
}

// Validate refuses unusable values, naming the flag.
func (c *Config) Validate(p string) error {
	if c.Tick < time.Millisecond {
		return fmt.Errorf("--%stick %s: want at least 1ms", p, c.Tick)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--%stimeout %s: want more than 0", p, c.Timeout)
	}
	return nil
}

// Target is a lag target: a consumer group reading a topic.
type Target struct {
	Ref     *commonv1.TargetRef
	Cluster Cluster
	// Topic is the input topic; empty means the one topic the group has
	// committed offsets for, or with AllTopics every one of them.
	Topic string
	// AllTopics, without Topic, reads every topic the group has committed
	// offsets for, its partitions named by topic in one sample (KEDA's
	// kafka scaler without a topic sums them all).
	AllTopics bool
	Group     string
	// Interval is how often the lag is read (the strategy's tick).
	Interval time.Duration
	// OnDemand targets are read only when Poll asks (a KEDA trigger in keda
	// mode, measured once per KEDA poll); Interval does not apply.
	OnDemand bool
}

// ErrUnknownTarget is returned by Poll for a target the fetcher does not
// hold, or no longer can read (Run has ended).
var ErrUnknownTarget = errors.New("unknown lag target")

// Recorder receives lag samples and error states.
type Recorder interface {
	// Record takes a sample; the recorder keeps it.
	Record(ref *commonv1.TargetRef, s *commonv1.MetricSample) bool
	// SetError puts the target in an error state: no data.
	SetError(ref *commonv1.TargetRef, msg string)
}

// Metrics are the fetcher's Prometheus metrics.
type Metrics struct {
	latency prometheus.Histogram
	errors  *prometheus.CounterVec
	targets prometheus.Gauge
}

// NewMetrics registers the fetcher's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_collector_lag_fetch_duration_seconds",
			Help:    "Time of one Kafka cluster's lag fetch (committed and end offsets of every due target).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_lag_fetch_errors_total",
			Help: "Lag targets that could not be measured at a fetch, by reason.",
		}, []string{"reason"}),
		targets: f.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_lag_targets",
			Help: "Lag targets being measured.",
		}),
	}
	for _, r := range []string{ReasonBroker, ReasonTopic, ReasonGroup, ReasonConfig} {
		m.errors.WithLabelValues(r)
	}
	return m
}

// Fetcher reads the lag of every target at its interval.
type Fetcher struct {
	cfg     Config
	rec     Recorder
	metrics *Metrics
	log     *zap.Logger
	limit   *logkey.Limiter
	now     func() time.Time

	// mu guards targets, clusters and stopped.
	mu       sync.Mutex
	targets  map[string]*target
	clusters map[string]*cluster
	// stopped is set when Run ends: no client is made after.
	stopped bool
	// idle is signalled (on mu) whenever a cluster's fetch ends.
	idle *sync.Cond
	// closing holds the closes of released clients; Run waits for them.
	closing sync.WaitGroup
}

type target struct {
	// spec is replaced whole by Set, never changed: fetches in flight
	// read it without the lock.
	spec    *Target
	cluster string
	next    time.Time
}

type cluster struct {
	cfg   Cluster
	cl    *kgo.Client
	ends  *endLister
	err   error // the options were unusable
	users int
	// busy is set while a fetch runs: a slow cluster is not asked twice.
	busy bool
	// due is the targets of the fetch dueLocked set busy for; that fetch
	// reads them without the lock, and dueLocked fills due again only once
	// busy is clear.
	due []*Target
	// round is what one periodic fetch keeps for the next: only the fetch
	// that set busy touches it.
	round roundState
}

// roundState is what a cluster's periodic fetch keeps for the next so as
// not to build it again at riff's 100 ms: its requests and its
// bookkeeping. A Poll, which may run beside a periodic fetch, has its own.
// No sample points into it: samples go to the recorder, which keeps them.
type roundState struct {
	ends    leaderAsks
	commits commitBufs
	groups  []string
	topics  []string
	topicOf []string
	allOf   [][]string // AllTopics targets' topics
	errOf   []error
	out     []measured
}

// New returns a Fetcher; it fetches nothing until Run.
func New(cfg Config, rec Recorder, m *Metrics, log *zap.Logger) *Fetcher {
	f := &Fetcher{cfg: cfg, rec: rec, metrics: m, log: log, limit: logkey.NewLimiter(time.Minute), now: time.Now,
		targets: map[string]*target{}, clusters: map[string]*cluster{}}
	f.idle = sync.NewCond(&f.mu)
	return f
}

// Set adds or replaces a target; it is fetched at the next tick. Once Run
// has ended it does nothing.
func (f *Fetcher) Set(t Target) {
	key := t.Ref.Key()
	ck := t.Cluster.key()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	if old, ok := f.targets[key]; ok {
		if old.cluster == ck {
			old.spec = &t
			return
		}
		f.releaseLocked(old.cluster)
	}
	c, ok := f.clusters[ck]
	if !ok {
		c = &cluster{cfg: t.Cluster}
		opts, err := t.Cluster.options()
		if err == nil {
			c.cl, err = kgo.NewClient(opts...)
		}
		if err != nil {
			c.err = err
		} else {
			c.ends = &endLister{cl: c.cl, adm: kadm.NewClient(c.cl)}
		}
		f.clusters[ck] = c
	}
	c.users++
	f.targets[key] = &target{spec: &t, cluster: ck}
	f.metrics.targets.Set(float64(len(f.targets)))
}

// Remove forgets a target, closing its cluster's client when unused.
func (f *Fetcher) Remove(ref *commonv1.TargetRef) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.targets[ref.Key()]; ok {
		delete(f.targets, ref.Key())
		f.releaseLocked(t.cluster)
		f.metrics.targets.Set(float64(len(f.targets)))
	}
}

func (f *Fetcher) releaseLocked(ck string) {
	c, ok := f.clusters[ck]
	if !ok {
		return // closed when Run ended
	}
	if c.users--; c.users == 0 {
		delete(f.clusters, ck)
		if c.cl != nil {
			// Close may wait on in-flight requests: not under mu. Run
			// waits for it.
			f.closing.Go(c.cl.Close)
		}
	}
}

// Run fetches due targets every tick until ctx ends, then closes clients,
// and returns once every client it or Remove closed is closed.
func (f *Fetcher) Run(ctx context.Context) error {
	tick := time.NewTicker(f.cfg.Tick)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		f.mu.Lock()
		// Once stopped is set, releaseLocked finds no cluster, so nothing
		// joins closing after its Wait began.
		f.stopped = true
		for ck, c := range f.clusters {
			if c.cl != nil {
				f.closing.Go(c.cl.Close)
			}
			delete(f.clusters, ck)
		}
		f.mu.Unlock()
		f.closing.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			f.mu.Lock()
			work := f.dueLocked(f.now())
			f.mu.Unlock()
			f.start(ctx, work, &wg)
		}
	}
}

// FetchNow fetches every target at once and waits for the results. A
// cluster's periodic fetch in flight, which may have begun before a target
// was added, is waited for first.
func (f *Fetcher) FetchNow(ctx context.Context) {
	f.mu.Lock()
	for f.busyLocked() {
		f.idle.Wait()
	}
	for _, t := range f.targets {
		t.next = time.Time{}
	}
	work := f.dueLocked(f.now())
	f.mu.Unlock()
	var wg sync.WaitGroup
	f.start(ctx, work, &wg)
	wg.Wait()
}

// busyLocked reports whether a cluster's fetch is in flight.
func (f *Fetcher) busyLocked() bool {
	for _, c := range f.clusters {
		if c.busy {
			return true
		}
	}
	return false
}

// dueLocked marks the clusters with due targets busy and returns them,
// each with those targets in its due.
func (f *Fetcher) dueLocked(now time.Time) []*cluster {
	for _, c := range f.clusters {
		if !c.busy {
			clear(c.due) // no Target kept past its fetch
			c.due = c.due[:0]
		}
	}
	var work []*cluster
	for _, t := range f.targets {
		c := f.clusters[t.cluster]
		if c == nil || t.spec.OnDemand || now.Before(t.next) || c.busy {
			continue
		}
		t.next = now.Add(t.spec.Interval)
		if len(c.due) == 0 {
			work = append(work, c)
		}
		c.due = append(c.due, t.spec)
	}
	for _, c := range work {
		c.busy = true
	}
	return work
}

// start fetches the due targets of each cluster of work on a goroutine of
// wg.
func (f *Fetcher) start(ctx context.Context, work []*cluster, wg *sync.WaitGroup) {
	for _, c := range work {
		wg.Go(func() {
			f.fetchCluster(ctx, c)
			f.mu.Lock()
			c.busy = false
			f.idle.Broadcast()
			f.mu.Unlock()
		})
	}
}

// Poll reads one target's lag now, whatever its interval, records the
// result as a periodic fetch does (the sample, or the target's error
// state), and returns it: the sample, or an error saying what failed (its
// reason first). Polls may run beside the periodic fetches of the
// target's cluster, whose client is safe for concurrent use.
func (f *Fetcher) Poll(ctx context.Context, ref *commonv1.TargetRef) (*commonv1.MetricSample, error) {
	f.mu.Lock()
	var (
		c    *cluster
		spec *Target
	)
	t, ok := f.targets[ref.Key()]
	if ok {
		c, spec = f.clusters[t.cluster], t.spec
	}
	f.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w %s", ErrUnknownTarget, ref.Key())
	}
	r := f.measure(ctx, c, []*Target{spec}, &roundState{})[0]
	if !f.record(spec, r) {
		return nil, fmt.Errorf("%s: %w", r.reason, r.err)
	}
	return r.sample, nil
}

// fetchCluster reads the committed offsets of every due group and the end
// offsets of every due topic of one cluster, then records each target. It
// runs while c is busy, so it owns c.due and c.round.
func (f *Fetcher) fetchCluster(ctx context.Context, c *cluster) {
	out := f.measure(ctx, c, c.due, &c.round)
	for i, r := range out {
		f.record(c.due[i], r)
	}
	clear(out) // the recorder has the samples; the next round makes its own
}

// record hands t's result to the recorder: its sample, or its error state
// (false).
func (f *Fetcher) record(t *Target, r measured) bool {
	if r.err != nil {
		f.fail(t, r.reason, r.err.Error())
		return false
	}
	f.rec.Record(t.Ref, r.sample)
	return true
}

// measured is one target's result of a fetch: a sample, or the reason and
// error of its failure.
type measured struct {
	sample *commonv1.MetricSample
	reason string
	err    error
}

// measure reads what fetchCluster records, in the order of ts, keeping its
// requests and bookkeeping in rs for the next measure with the same rs.
func (f *Fetcher) measure(ctx context.Context, c *cluster, ts []*Target, rs *roundState) []measured {
	rs.out = reuse(rs.out, len(ts))
	out := rs.out
	if c.err != nil {
		for i := range ts {
			out[i] = measured{reason: ReasonConfig, err: fmt.Errorf("kafka cluster %v: %w", c.cfg.Brokers, c.err)}
		}
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	began := time.Now()
	defer func() { f.metrics.latency.Observe(time.Since(began).Seconds()) }()

	groups := rs.groups[:0]
	for _, t := range ts {
		groups = append(groups, t.Group)
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	rs.groups = groups
	commits := fetchCommits(ctx, c.cl, groups, &rs.commits)

	rs.topicOf, rs.allOf, rs.errOf = reuse(rs.topicOf, len(ts)), reuse(rs.allOf, len(ts)), reuse(rs.errOf, len(ts))
	topicOf, allOf, errOf := rs.topicOf, rs.allOf, rs.errOf
	topics := rs.topics[:0]
	for i, t := range ts {
		gr, ok := commits[t.Group]
		switch {
		case !ok:
			errOf[i] = fmt.Errorf("consumer group %q: no answer", t.Group)
		case errors.Is(gr.err, kerr.GroupIDNotFound):
			// A group that never committed (its consumers have not started)
			// has no offsets: every partition counts as uncommitted, which
			// the strategy's reset policy prices, as riff and KEDA do.
			commits[t.Group] = groupCommits{}
			if t.Topic == "" {
				errOf[i] = fmt.Errorf("consumer group %q does not exist and no topic is named", t.Group)
				break
			}
			topicOf[i] = t.Topic
		case gr.err != nil:
			errOf[i] = fmt.Errorf("consumer group %q: %w", t.Group, gr.err)
		case t.Topic != "":
			topicOf[i] = t.Topic
		case t.AllTopics:
			allOf[i] = gr.topics()
			if len(allOf[i]) == 0 {
				errOf[i] = fmt.Errorf("consumer group %q has committed offsets for no topic and no topic is named", t.Group)
			}
			topics = append(topics, allOf[i]...)
		default:
			committed := gr.topics()
			if len(committed) != 1 {
				errOf[i] = fmt.Errorf("consumer group %q has committed offsets for %d topics %v: name the topic", t.Group, len(committed), committed)
				break
			}
			topicOf[i] = committed[0]
		}
		if topicOf[i] != "" {
			topics = append(topics, topicOf[i])
		}
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	rs.topics = topics
	var ends endOffsets
	var endsErr error
	if len(topics) > 0 {
		ends, endsErr = c.ends.list(ctx, topics, f.now(), &rs.ends)
	}
	now := f.now()
	for i, t := range ts {
		if err := errOf[i]; err != nil {
			reason := ReasonGroup
			if isBrokerErr(err) {
				reason = ReasonBroker
			}
			out[i] = measured{reason: reason, err: err}
			continue
		}
		r := &out[i]
		if t.AllTopics && t.Topic == "" {
			r.sample, r.reason, r.err = sampleTopics(ends, endsErr, commits[t.Group], allOf[i], now)
		} else {
			r.sample, r.reason, r.err = sample(ends, endsErr, commits[t.Group], topicOf[i], now)
		}
	}
	return out
}

// sample builds one target's lag sample from the cluster's answers.
func sample(ends endOffsets, endsErr error, fetched groupCommits, topic string, now time.Time) (*commonv1.MetricSample, string, error) {
	te, ok := ends[topic]
	if !ok {
		if endsErr != nil {
			return nil, ReasonBroker, fmt.Errorf("topic %q end offsets: %w", topic, endsErr)
		}
		return nil, ReasonTopic, fmt.Errorf("topic %q: no end offsets", topic)
	}
	if te.err != nil {
		if errors.Is(te.err, kerr.UnknownTopicOrPartition) {
			return nil, ReasonTopic, fmt.Errorf("topic %q does not exist", topic)
		}
		return nil, ReasonTopic, fmt.Errorf("topic %q: %w", topic, te.err)
	}
	for _, p := range te.parts {
		if p.err != nil || p.offset < 0 {
			reason := ReasonTopic
			if isBrokerErr(p.err) {
				reason = ReasonBroker
			}
			return nil, reason, fmt.Errorf("topic %q partition %d end offset %d: %w", topic, p.id, p.offset, p.err)
		}
	}
	// The sample is carved from three allocations: itself with its time
	// and count, its partitions with their committed offsets, and the
	// pointers to those. The recorder keeps all of it.
	vals := make([]partitionLagBox, len(te.parts))
	lags := make([]*commonv1.PartitionLag, len(te.parts))
	for i, p := range te.parts {
		v := &vals[i]
		v.lag.Partition, v.lag.EndOffset = p.id, p.offset
		if at, ok := fetched.at(topic, p.id); ok {
			v.committed = at
			v.lag.CommittedOffset = &v.committed
		}
		lags[i] = &v.lag
	}
	b := &sampleBox{}
	b.time.Seconds, b.time.Nanos = now.Unix(), int32(now.Nanosecond()) // as timestamppb.New
	b.count = int32(len(lags))
	b.sample.Time, b.sample.Source, b.sample.PartitionLags, b.sample.PartitionCount = &b.time, commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, lags, &b.count
	return &b.sample, "", nil
}

// sampleBox is a sample with the time and count it points to, in one
// allocation.
type sampleBox struct {
	sample commonv1.MetricSample
	time   timestamppb.Timestamp
	count  int32
}

// partitionLagBox is a partition's lag with the committed offset it points
// to.
type partitionLagBox struct {
	lag       commonv1.PartitionLag
	committed int64
}

// reuse returns s cleared at length n, in its own array when large enough.
func reuse[S ~[]E, E any](s S, n int) S {
	if cap(s) < n {
		return make(S, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// sampleTopics is sample for every topic of topics, in one sample whose
// partitions name their topic.
func sampleTopics(ends endOffsets, endsErr error, fetched groupCommits, topics []string, now time.Time) (*commonv1.MetricSample, string, error) {
	var all *commonv1.MetricSample
	for _, topic := range topics {
		s, reason, err := sample(ends, endsErr, fetched, topic, now)
		if err != nil {
			return nil, reason, err
		}
		if all == nil {
			n := int32(0)
			all = &commonv1.MetricSample{Time: s.Time, Source: s.Source, PartitionCount: &n}
		}
		if len(all.PartitionLags)+len(s.PartitionLags) > commonv1.MaxPartitionLags {
			return nil, ReasonTopic, fmt.Errorf("topics %v: more than %d partitions in all", topics, commonv1.MaxPartitionLags)
		}
		for _, pl := range s.PartitionLags {
			pl.Topic = topic
			all.PartitionLags = append(all.PartitionLags, pl)
		}
		*all.PartitionCount += s.GetPartitionCount()
	}
	return all, "", nil
}

func isBrokerErr(err error) bool {
	if err == nil {
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return true // a transport or timeout error
}

func (f *Fetcher) fail(t *Target, reason, msg string) {
	f.metrics.errors.WithLabelValues(reason).Inc()
	f.rec.SetError(t.Ref, reason+": "+msg)
	if f.limit.Allow(t.Ref.Key(), f.now()) {
		f.log.Warn("lag fetch failed", logkey.Target(t.Ref.Key()), logkey.Reason(reason), zap.String("error", msg))
	}
}
