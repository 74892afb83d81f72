package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/decider/engine"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
)

// sender delivers decisions to the actuator's Scale. Per target only the
// newest decision waits: a newer one replaces an older one not yet sent, and
// a failed call is retried with backoff unless a newer decision arrived.
type sender struct {
	client actuatorv1.ActuatorServiceClient
	log    *zap.Logger
	dryRun bool
	sent   *prometheus.CounterVec

	// mu guards pending and wake.
	mu      sync.Mutex
	pending map[string]engine.Decision
	wake    chan struct{}
}

func newSender(client actuatorv1.ActuatorServiceClient, dryRun bool, log *zap.Logger, reg prometheus.Registerer) *sender {
	s := &sender{
		client:  client,
		log:     log,
		dryRun:  dryRun,
		pending: map[string]engine.Decision{},
		wake:    make(chan struct{}, 1),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_decider_scale_calls_total",
			Help: "Scale calls to the actuator by result: applied, stale or error.",
		}, []string{"result"}),
	}
	reg.MustRegister(s.sent)
	return s
}

// enqueue queues decisions; invalid ones (desired -1) are never sent.
func (s *sender) enqueue(ds []engine.Decision) {
	s.mu.Lock()
	for _, d := range ds {
		if !d.Valid() {
			continue
		}
		key := d.Target.Key()
		if old, ok := s.pending[key]; ok && old.Sequence > d.Sequence {
			continue
		}
		s.pending[key] = d
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) take() []engine.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]engine.Decision, 0, len(s.pending))
	for k, d := range s.pending {
		out = append(out, d)
		delete(s.pending, k)
	}
	return out
}

// run sends until ctx ends.
func (s *sender) run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		failed := false
		for _, d := range s.take() {
			if s.send(ctx, d) != nil {
				failed = true
				s.enqueue([]engine.Decision{d}) // keeps a newer one if it came meanwhile
			}
		}
		if !failed {
			backoff = 100 * time.Millisecond
			continue
		}
		// A failure may be the shutdown itself; the select below ends the
		// loop then, without a retry.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *sender) send(ctx context.Context, d engine.Decision) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := &actuatorv1.ScaleRequest{
		Target:           refOf(d.Target),
		DesiredReplicas:  d.Bounded(),
		DecisionSequence: d.Sequence,
		Reason:           d.Reason,
		DryRun:           s.dryRun,
	}
	if b := d.Bounded(); b != d.Desired {
		req.Reason = fmt.Sprintf("max-scale: %d → %d; %s", d.Desired, b, d.Reason)
	}
	if d.Strategy == engine.KPA {
		// The reconciler needs it to choose the SKS mode and activator count.
		ebc := float64(d.ExcessBurstCapacity)
		req.ExcessBurstCapacity = &ebc
	}
	resp, err := s.client.Scale(cctx, req)
	if err != nil {
		s.sent.WithLabelValues("error").Inc()
		code := status.Code(err)
		lvl := s.log.Warn
		if code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition {
			// Retrying the same decision cannot help; a newer one will come.
			s.log.Info("actuator refused decision", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
			return nil
		}
		lvl("scale call failed; will retry", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return err
	}
	if resp.GetStale() {
		s.sent.WithLabelValues("stale").Inc()
		return nil
	}
	s.sent.WithLabelValues("applied").Inc()
	return nil
}
