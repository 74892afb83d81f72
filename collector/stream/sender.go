package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tidalscale/tidal/collector/history"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Config tunes a Sender.
type Config struct {
	// CollectorID names this collector in every batch.
	CollectorID string
	// MinBackoff and MaxBackoff bound the wait between reconnects; each
	// failure doubles the wait, with up to 50 % random jitter.
	MinBackoff, MaxBackoff time.Duration
}

// Sender streams one store to one decider.
type Sender struct {
	cfg    Config
	store  *history.Store
	client deciderv1.DeciderServiceClient
	log    *zap.Logger
	// connected is called with true when a stream is open and with false
	// when it ends; nil means nobody listens.
	connected func(bool)
}

// New returns a Sender; it does nothing until Run.
func New(cfg Config, store *history.Store, conn grpc.ClientConnInterface, log *zap.Logger, connected func(bool)) *Sender {
	if connected == nil {
		connected = func(bool) {}
	}
	return &Sender{cfg: cfg, store: store, client: deciderv1.NewDeciderServiceClient(conn), log: log, connected: connected}
}

// Run streams until ctx ends, reconnecting after every failure. It returns
// nil when ctx ends.
func (s *Sender) Run(ctx context.Context) error {
	backoff := s.cfg.MinBackoff
	for {
		start := time.Now()
		err := s.session(ctx)
		s.connected(false)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > s.cfg.MaxBackoff {
			backoff = s.cfg.MinBackoff // the stream was healthy for a while
		}
		wait := backoff + time.Duration(rand.Int64N(int64(backoff)/2+1))
		s.log.Warn("decider stream ended; reconnecting", zap.Error(err), zap.Duration("after", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// session runs one stream: replay everything, then send changes as they come.
func (s *Sender) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.client.Ingest(sctx)
	if err != nil {
		return fmt.Errorf("open ingest stream: %w", err)
	}
	s.connected(true)
	var cursor uint64
	replay := true
	for {
		changed := s.store.Changed()
		batch, next, ok := s.store.Since(cursor)
		if ok {
			batch.CollectorId = s.cfg.CollectorID
			batch.Replay = replay
			if err := st.Send(batch); err != nil {
				if errors.Is(err, io.EOF) {
					// The server ended the stream; its status says why.
					_, err = st.CloseAndRecv()
				}
				return fmt.Errorf("send batch: %w", err)
			}
			cursor = next
		}
		replay = false
		select {
		case <-ctx.Done():
			_, _ = st.CloseAndRecv()
			return ctx.Err()
		case <-changed:
		}
	}
}
