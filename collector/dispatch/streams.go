package dispatch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/logkey"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// StreamsConfig tunes the streams to deciders.
type StreamsConfig struct {
	// CollectorID names this collector in every batch.
	CollectorID string
	// FlushInterval is how long samples may wait to be batched; an urgent
	// pushed stat (a target at zero) goes at once.
	FlushInterval time.Duration
	// BatchSamples sends a batch as soon as this many samples wait, and
	// bounds the samples of one replay batch.
	BatchSamples int
	// HighWater bounds the samples waiting for one decider.
	HighWater int
	// MinBackoff and MaxBackoff bound the wait between reconnects; each
	// failure doubles it, plus up to 50 % jitter.
	MinBackoff, MaxBackoff time.Duration
}

// RegisterFlagsWithPrefix registers the stream flags with their defaults.
func (c *StreamsConfig) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.DurationVar(&c.FlushInterval, p+"flush-interval", 50*time.Millisecond, "Longest time a sample waits to be batched for its decider; a pushed stat for a target at zero is sent at once.")
	fs.IntVar(&c.BatchSamples, p+"batch-samples", 4096, "Samples per Ingest batch at most; a full batch is sent at once.")
	fs.IntVar(&c.HighWater, p+"queue-samples", 65536, "Samples waiting for one decider at most; beyond it the stream is reopened and replays history, and PushStats waits meanwhile.")
	fs.DurationVar(&c.MinBackoff, p+"reconnect-min-backoff", 100*time.Millisecond, "First wait before reconnecting a broken decider stream.")
	fs.DurationVar(&c.MaxBackoff, p+"reconnect-max-backoff", 5*time.Second, "Longest wait between reconnects.")
}

// Validate refuses unusable values, naming the flag.
func (c *StreamsConfig) Validate(p string) error {
	switch {
	case c.CollectorID == "" || len(c.CollectorID) > 253:
		return fmt.Errorf("--collector-id %q: want 1 to 253 bytes", c.CollectorID)
	case c.FlushInterval <= 0:
		return fmt.Errorf("--%sflush-interval %s: want more than 0", p, c.FlushInterval)
	case c.BatchSamples < 1:
		return fmt.Errorf("--%sbatch-samples %d: want at least 1", p, c.BatchSamples)
	case c.HighWater < c.BatchSamples:
		return fmt.Errorf("--%squeue-samples %d: want at least --%sbatch-samples (%d)", p, c.HighWater, p, c.BatchSamples)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("--%sreconnect-min-backoff %s, --%sreconnect-max-backoff %s: want 0 < min <= max", p, c.MinBackoff, p, c.MaxBackoff)
	}
	return nil
}

// Streams keeps one stream open to every decider endpoint and feeds each
// from the hub.
type Streams struct {
	cfg  StreamsConfig
	hub  *Hub
	dial func(addr string) (*grpc.ClientConn, error)
	log  *zap.Logger

	// mu guards senders; ctx is set by Run.
	mu      sync.Mutex
	ctx     context.Context
	senders map[string]*sender
	wg      sync.WaitGroup
}

type sender struct {
	addr   string
	conn   *grpc.ClientConn
	cancel context.CancelFunc
}

// NewStreams returns Streams over hub; nothing is dialled before Run.
func NewStreams(cfg StreamsConfig, hub *Hub, log *zap.Logger, opts ...grpc.DialOption) *Streams {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Reconnect on the streams' own schedule rather than gRPC's default
	// (1 s growing to 2 min), so a restarted decider is fed within
	// MaxBackoff.
	opts = append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.MinBackoff, Multiplier: 2, Jitter: 0.5, MaxDelay: cfg.MaxBackoff},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	return &Streams{
		cfg: cfg,
		hub: hub,
		dial: func(addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, opts...)
		},
		log:     log,
		senders: map[string]*sender{},
	}
}

// Run serves until ctx ends, then stops every stream.
func (s *Streams) Run(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	s.hub.mu.Lock()
	pending := slices.Clone(s.hub.members)
	for _, ob := range s.hub.shadows {
		pending = append(pending, ob.addr)
	}
	s.hub.mu.Unlock()
	for _, a := range pending {
		s.startLocked(a)
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	for _, sd := range s.senders {
		sd.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	for a, sd := range s.senders {
		_ = sd.conn.Close()
		delete(s.senders, a)
	}
	s.mu.Unlock()
	return nil
}

// SetDeciders replaces the decider endpoints: targets move by rendezvous
// hashing, streams open to new endpoints and close to gone ones.
func (s *Streams) SetDeciders(addrs []string) {
	added, gone := s.hub.setDeciders(addrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range gone {
		if sd, ok := s.senders[a]; ok {
			sd.cancel()
			delete(s.senders, a)
			// The conn closes when its sender returns.
		}
	}
	if s.ctx == nil {
		return // Run starts them
	}
	for _, a := range added {
		s.startLocked(a)
	}
}

func (s *Streams) startLocked(addr string) {
	if _, ok := s.senders[addr]; ok || s.ctx.Err() != nil {
		return
	}
	log := s.log.With(logkey.Decider(addr))
	conn, err := s.dial(addr)
	if err != nil {
		// Only a malformed target fails here; gRPC dials lazily.
		log.Error("decider endpoint refused", zap.Error(err))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	sd := &sender{addr: addr, conn: conn, cancel: cancel}
	s.senders[addr] = sd
	s.wg.Go(func() {
		defer func() { _ = conn.Close() }()
		s.run(ctx, sd, log)
		// Only now is nothing left to write this decider's series.
		s.hub.forgetDecider(addr)
	})
}

// backoff is the wait between reconnects: from MinBackoff, doubling to
// MaxBackoff, each up to half again longer so that collectors do not
// reconnect in step.
func (c *StreamsConfig) backoff() wait.Backoff {
	return wait.Backoff{Duration: c.MinBackoff, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: c.MaxBackoff}
}

// run streams to one decider until ctx ends, reconnecting after failures.
func (s *Streams) run(ctx context.Context, sd *sender, log *zap.Logger) {
	client := deciderv1.NewDeciderServiceClient(sd.conn)
	backoff := s.cfg.backoff()
	for {
		start := time.Now()
		err := s.session(ctx, sd.addr, client)
		s.hub.disconnect(sd.addr)
		s.hub.metrics.connected.WithLabelValues(sd.addr).Set(0)
		if ctx.Err() != nil {
			return
		}
		s.hub.metrics.failures.WithLabelValues(sd.addr).Inc()
		if time.Since(start) > s.cfg.MaxBackoff {
			backoff = s.cfg.backoff() // the stream was healthy for a while
		}
		after := backoff.Step()
		log.Warn("decider stream ended; reconnecting", zap.Error(err), zap.Duration("after", after))
		select {
		case <-ctx.Done():
			return
		case <-time.After(after):
		}
	}
}

// session runs one stream: replay everything the decider owns, then send
// batches as they fill or age. It returns when ctx ends or the stream fails.
func (s *Streams) session(ctx context.Context, addr string, client deciderv1.DeciderServiceClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Ingest(sctx)
	if err != nil {
		return fmt.Errorf("open ingest stream: %w", err)
	}
	// The decider answers only when the stream ends: a receive that returns
	// is how a send-only stream learns, without sending, that the decider
	// went away.
	ended := make(chan error, 1)
	go func() { ended <- st.RecvMsg(new(deciderv1.IngestResponse)) }()
	defer func() {
		cancel()
		_ = drain(ended) // the receive ends once the stream does
	}()
	ob := s.hub.connect(addr, cancel)
	if ob == nil {
		return errors.New("decider no longer an endpoint")
	}
	s.hub.metrics.connected.WithLabelValues(addr).Set(1)
	endErr := func(err error) error {
		if err == nil {
			return errors.New("decider closed the stream")
		}
		return err
	}
	send := func(b *deciderv1.IngestRequest) error {
		b.CollectorId = s.cfg.CollectorID
		if err := st.Send(b); err != nil {
			if errors.Is(err, io.EOF) {
				// The decider ended the stream; its status says why.
				err = endErr(<-ended)
				ended <- err
			}
			return fmt.Errorf("send batch: %w", err)
		}
		n := 0
		for _, m := range b.GetMetrics() {
			n += len(m.GetSamples())
		}
		s.hub.metrics.sent.WithLabelValues(addr).Add(float64(n))
		s.hub.metrics.batches.WithLabelValues(addr).Inc()
		return nil
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	// claim wakes the stream to say how far its samples have come (claimAt).
	claim := time.NewTimer(time.Hour)
	defer claim.Stop()
	for {
		work, urgent := s.hub.pendingWork(addr)
		claim.Stop()
		if at := s.hub.claimAt(addr); !at.IsZero() {
			if d := time.Until(at); d > 0 {
				claim.Reset(d)
			} else {
				work, urgent = work+1, true
			}
		}
		if work > 0 && (urgent || work >= s.cfg.BatchSamples) {
			timer.Stop()
			armed = false
			if err := s.flush(addr, send); err != nil {
				return err
			}
			continue
		}
		if work > 0 && !armed {
			timer.Reset(s.cfg.FlushInterval)
			armed = true
		}
		select {
		case <-ctx.Done():
			// Send what waits, then end the stream cleanly.
			if s.flush(addr, send) == nil && st.CloseSend() == nil {
				select {
				case err := <-ended:
					ended <- err
				case <-time.After(time.Second):
				}
			}
			return ctx.Err()
		case err := <-ended:
			ended <- err
			return fmt.Errorf("stream ended: %w", endErr(err))
		case <-ob.wake:
		case <-claim.C:
		case <-timer.C:
			armed = false
			if err := s.flush(addr, send); err != nil {
				return err
			}
		}
	}
}

func (s *Streams) flush(addr string, send func(*deciderv1.IngestRequest) error) error {
	bs := s.hub.take(addr, s.cfg.BatchSamples)
	for _, b := range slices.Concat(bs.replay, bs.live) {
		if err := send(b); err != nil {
			return err
		}
	}
	s.hub.caughtUp(addr)
	return nil
}

func drain(c <-chan error) error { return <-c }
