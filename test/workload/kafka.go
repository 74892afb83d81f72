package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerOptions configure Consumers.
type ConsumerOptions struct {
	// Client watches the Function's pods.
	Client kubernetes.Interface
	// Namespace and Selector pick the pods, such as "function=echo" for a
	// Function deployed as riff's Deployer does.
	Namespace, Selector string
	// Brokers are the Kafka bootstrap addresses.
	Brokers []string
	// Topic is consumed by Group, the Function's consumer group.
	Topic, Group string
	// RatePerPod is how many records one pod processes per second; > 0.
	RatePerPod float64
	// ColdStart is how long a pod takes, after it turns Ready, before it
	// joins the group.
	ColdStart time.Duration
	// CommitInterval is how often processed offsets are committed; 0 means
	// 1 s, the interval riff's sidecar committed at.
	CommitInterval time.Duration
}

func (o ConsumerOptions) validate() error {
	switch {
	case o.Client == nil || o.Namespace == "" || o.Selector == "":
		return errors.New("consumers: Client, Namespace and Selector are required")
	case len(o.Brokers) == 0 || o.Topic == "" || o.Group == "":
		return errors.New("consumers: Brokers, Topic and Group are required")
	case !(o.RatePerPod > 0) || math.IsInf(o.RatePerPod, 0):
		return fmt.Errorf("consumers: RatePerPod = %v: want a finite rate > 0", o.RatePerPod)
	case o.ColdStart < 0 || o.CommitInterval < 0:
		return fmt.Errorf("consumers: ColdStart = %s, CommitInterval = %s: want >= 0", o.ColdStart, o.CommitInterval)
	}
	return nil
}

// Consumers runs one consumer-group member per Ready pod of a Function, as
// the Function's sidecar would: each reads the topic from the oldest offset
// when the group has none, processes RatePerPod records a second, and commits
// what it processed. A pod that goes away commits and leaves the group, and
// its partitions move to the others.
type Consumers struct {
	opts      ConsumerOptions
	cancel    context.CancelFunc
	done      sync.WaitGroup
	processed atomic.Int64
	// rate is RatePerPod as float64 bits, changeable while running.
	rate atomic.Uint64

	// mu guards members and err.
	mu      sync.Mutex
	members map[string]*member // by pod name
	err     error
}

type member struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartConsumers starts watching the pods and returns once the watch has
// synced; members start as pods turn Ready.
func StartConsumers(ctx context.Context, opts ConsumerOptions) (*Consumers, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.CommitInterval == 0 {
		opts.CommitInterval = time.Second
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Consumers{opts: opts, cancel: cancel, members: map[string]*member{}}
	c.rate.Store(math.Float64bits(opts.RatePerPod))
	synced, waitWatch := watchPods(runCtx, opts.Client, opts.Namespace, opts.Selector, podEvents{
		ready: func(p *corev1.Pod) { c.addMember(runCtx, p.Name) },
		gone:  c.removeMember,
	})
	c.done.Go(waitWatch)
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		c.Stop()
		return nil, fmt.Errorf("consumers %s/%s: pod informer did not sync: %w", opts.Namespace, opts.Selector, ctx.Err())
	}
	return c, nil
}

func (c *Consumers) addMember(ctx context.Context, pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.members[pod]; ok || ctx.Err() != nil {
		return
	}
	mctx, cancel := context.WithCancel(ctx)
	m := &member{cancel: cancel, done: make(chan struct{})}
	c.members[pod] = m
	c.done.Go(func() {
		defer close(m.done)
		if err := c.consume(mctx, pod); err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.mu.Unlock()
		}
	})
}

func (c *Consumers) removeMember(pod string) {
	c.mu.Lock()
	m, ok := c.members[pod]
	delete(c.members, pod)
	c.mu.Unlock()
	if ok {
		m.cancel()
		<-m.done
	}
}

// consume is one pod's consumer: join after the cold start, then process at
// the pod's rate until ctx ends, then commit and leave.
func (c *Consumers) consume(ctx context.Context, pod string) error {
	select {
	case <-time.After(c.opts.ColdStart):
	case <-ctx.Done():
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ClientID(pod),
		kgo.ConsumerGroup(c.opts.Group),
		kgo.ConsumeTopics(c.opts.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(c.opts.CommitInterval),
		// Fetch little at a time: records fetched but not processed stay
		// uncommitted, and a pod that leaves hands them back.
		kgo.FetchMaxBytes(64<<10),
	)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", pod, err)
	}
	defer func() {
		// Commit what was processed, then leave so the group rebalances at
		// once rather than after a session timeout.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cl.CommitMarkedOffsets(cctx)
		cl.Close()
	}()

	next := time.Now()
	for {
		fetches := cl.PollRecords(ctx, 100)
		if ctx.Err() != nil {
			return nil
		}
		if errs := fetches.Errors(); len(errs) > 0 && fetches.NumRecords() == 0 {
			// Transient (rebalances, a broker restarting): back off briefly.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		for _, r := range fetches.Records() {
			// Pace at the pod's rate; after an idle spell, do not burst to
			// catch up on time that passed with nothing to do.
			if now := time.Now(); next.Before(now) {
				next = now
			}
			next = next.Add(time.Duration(float64(time.Second) / math.Float64frombits(c.rate.Load())))
			select {
			case <-time.After(time.Until(next)):
			case <-ctx.Done():
				return nil
			}
			cl.MarkCommitRecords(r)
			c.processed.Add(1)
		}
	}
}

// SetRatePerPod changes how many records each pod processes per second, from
// the next record on: slow consumers down to build lag, speed them up to
// drain it.
func (c *Consumers) SetRatePerPod(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("consumers: rate per pod = %v: want a finite rate > 0", rate)
	}
	c.rate.Store(math.Float64bits(rate))
	return nil
}

// Processed returns how many records all pods have processed.
func (c *Consumers) Processed() int64 { return c.processed.Load() }

// Members returns the pods currently running a consumer, sorted.
func (c *Consumers) Members() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.members))
	for n := range c.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Err returns the first error a member hit, or nil.
func (c *Consumers) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stop stops every member (each commits and leaves the group) and the watch.
func (c *Consumers) Stop() {
	c.cancel()
	c.done.Wait()
}

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	// Brokers are the Kafka bootstrap addresses.
	Brokers []string
	// Topic receives the records, spread round-robin over its partitions.
	Topic string
	// Profile is the produce rate over time, in records per second.
	Profile Profile
	// Tick is how often records are produced; 0 means 10 ms.
	Tick time.Duration
}

// Producer writes records to a topic at a Profile's rate. Each record's value
// is its sequence number in decimal.
type Producer struct {
	cancel   context.CancelFunc
	done     sync.WaitGroup
	cl       *kgo.Client
	produced atomic.Int64
	failed   atomic.Int64
	// mu guards err.
	mu  sync.Mutex
	err error
}

// StartProducer starts producing at once.
func StartProducer(opts ProducerOptions) (*Producer, error) {
	if len(opts.Brokers) == 0 || opts.Topic == "" || opts.Profile == nil {
		return nil, errors.New("producer: Brokers, Topic and Profile are required")
	}
	if opts.Tick <= 0 {
		opts.Tick = 10 * time.Millisecond
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(opts.Brokers...),
		kgo.DefaultProduceTopic(opts.Topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{cancel: cancel, cl: cl}
	p.done.Go(func() { p.run(ctx, opts) })
	return p, nil
}

func (p *Producer) run(ctx context.Context, opts ProducerOptions) {
	start := time.Now()
	last := start
	t := time.NewTicker(opts.Tick)
	defer t.Stop()
	carry, seq := 0.0, int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			dt := now.Sub(last)
			rate := opts.Profile.Rate(last.Add(dt / 2).Sub(start))
			last = now
			if rate > 0 && !math.IsInf(rate, 0) {
				carry += rate * dt.Seconds()
			}
			n := int(carry + 1e-9)
			carry = max(carry-float64(n), 0)
			for range n {
				seq++
				r := &kgo.Record{Value: []byte(strconv.FormatInt(seq, 10))}
				// Not ctx: Stop flushes what was already produced.
				p.cl.Produce(context.Background(), r, p.ack)
			}
		}
	}
}

func (p *Producer) ack(_ *kgo.Record, err error) {
	if err == nil {
		p.produced.Add(1)
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p.failed.Add(1)
	p.mu.Lock()
	if p.err == nil {
		p.err = fmt.Errorf("produce: %w", err)
	}
	p.mu.Unlock()
}

// Produced returns how many records the broker acknowledged.
func (p *Producer) Produced() int64 { return p.produced.Load() }

// Err returns the first produce error, or nil.
func (p *Producer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop stops producing, waits for outstanding acknowledgements and closes
// the client.
func (p *Producer) Stop() {
	p.cancel()
	p.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.cl.Flush(ctx)
	p.cl.Close()
}
