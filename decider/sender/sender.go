// Package sender delivers a decider's decisions to the actuator's Scale RPC:
// concurrently across targets, one call at a time per target, newest
// decision first.
package sender

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/util/workqueue"

	"github.com/tidalscale/tidal/decider/engine"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Config configures a Sender.
type Config struct {
	// Workers is how many Scale calls may be in flight at once, each for a
	// different target.
	Workers int
	// Timeout bounds one Scale call.
	Timeout time.Duration
	// DryRun sends every call as a dry run.
	DryRun bool
	// RetryMin and RetryMax bound the per-target backoff after a failed call.
	RetryMin, RetryMax time.Duration
}

// Validate refuses a configuration the Sender cannot run with.
func (c *Config) Validate() error {
	if c.Workers < 1 || c.Workers > 1024 {
		return fmt.Errorf("scale workers %d: want 1 to 1024", c.Workers)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("scale timeout %s: want > 0", c.Timeout)
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("scale retry backoff %s to %s: want 0 < min ≤ max", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Sender queues decisions per target and calls Scale from a pool of
// workers. Only the newest decision of a target waits: a newer one
// replaces an older one not yet sent. The workqueue never hands one target
// to two workers, so a target's calls are made one after another, in
// sequence order, while different targets' calls run side by side. A failed
// call is retried with per-target backoff unless a newer decision replaced
// it meanwhile.
type Sender struct {
	cfg    Config
	client actuatorv1.ActuatorServiceClient
	log    *zap.Logger
	queue  workqueue.TypedRateLimitingInterface[string]

	calls      *prometheus.CounterVec
	superseded prometheus.Counter
	latency    prometheus.Histogram

	// mu guards pending: per target key, the newest decision not yet sent.
	// It holds at most one entry per target the engine holds.
	mu      sync.Mutex
	pending map[string]engine.Decision
}

// New returns a Sender; it sends nothing until Run.
func New(cfg Config, client actuatorv1.ActuatorServiceClient, log *zap.Logger, reg prometheus.Registerer) *Sender {
	s := &Sender{
		cfg:    cfg,
		client: client,
		log:    log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryMin, cfg.RetryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "scale"}),
		pending: map[string]engine.Decision{},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_decider_scale_calls_total",
			Help: "Scale calls to the actuator by result: applied, stale, refused or error.",
		}, []string{"result"}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidal_decider_scale_superseded_total",
			Help: "Decisions replaced by a newer one for the same target before they were sent.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_decider_scale_call_seconds",
			Help:    "Duration of Scale calls to the actuator.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	reg.MustRegister(s.calls, s.superseded, s.latency, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_decider_scale_pending",
		Help: "Targets whose newest decision waits to be sent.",
	}, func() float64 { return float64(s.Pending()) }))
	return s
}

// Pending is the number of targets with a decision waiting to be sent.
func (s *Sender) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Enqueue queues decisions; invalid ones (no desired scale) and advisory
// ones (a target something else scales, such as KEDA) are never sent, and
// one older than a decision already waiting for its target is dropped.
func (s *Sender) Enqueue(ds []engine.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ds {
		d := &ds[i]
		if !d.Valid() || d.Advisory {
			continue
		}
		key := d.Target.Key()
		if old, ok := s.pending[key]; ok {
			if old.Sequence > d.Sequence {
				continue
			}
			s.superseded.Inc()
		}
		s.pending[key] = *d
		s.queue.Add(key)
	}
}

// Run sends until ctx ends, then waits for the calls in flight.
func (s *Sender) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	return nil
}

// next sends one target's newest decision; false means the queue is shut.
func (s *Sender) next(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	s.mu.Lock()
	d, ok := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if !ok {
		s.queue.Forget(key)
		return true
	}
	if err := s.send(ctx, &d); err != nil && ctx.Err() == nil {
		s.mu.Lock()
		if _, newer := s.pending[key]; !newer {
			s.pending[key] = d
		}
		s.mu.Unlock()
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// send makes one Scale call; an error means a retry may help.
func (s *Sender) send(ctx context.Context, d *engine.Decision) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req := &actuatorv1.ScaleRequest{
		Target:           TargetRef(d.Target),
		DesiredReplicas:  d.Bounded(),
		DecisionSequence: d.Sequence,
		Reason:           d.Reason,
		DryRun:           s.cfg.DryRun,
	}
	if b := d.Bounded(); b != d.Desired {
		req.Reason = fmt.Sprintf("max-scale: %d → %d; %s", d.Desired, b, d.Reason)
	}
	if d.Strategy == engine.KPA {
		// The reconciler needs it to choose the activator mode.
		ebc := float64(d.ExcessBurstCapacity)
		req.ExcessBurstCapacity = &ebc
		// The keep-alive policy's memory rides on the write this decision
		// makes anyway; its prediction lets the last pod go without grace.
		req.KeepAliveState = d.KeepAliveState
		req.PredictedIdle = d.PredictedIdle() && req.DesiredReplicas == 0
	}
	began := time.Now()
	resp, err := s.client.Scale(cctx, req)
	s.latency.Observe(time.Since(began).Seconds())
	switch code := status.Code(err); {
	case err == nil && resp.GetStale():
		s.calls.WithLabelValues("stale").Inc()
		return nil
	case err == nil:
		s.calls.WithLabelValues("applied").Inc()
		return nil
	case code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition || code == codes.PermissionDenied:
		// Retrying the same decision cannot help; a newer one will come.
		s.calls.WithLabelValues("refused").Inc()
		s.log.Info("actuator refused decision", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return err // shutting down
	default:
		s.calls.WithLabelValues("error").Inc()
		s.log.Warn("scale call failed; will retry", zap.String("target", d.Target.Key()), zap.Uint64("sequence", d.Sequence), zap.Error(err))
		return err
	}
}

// TargetRef converts an engine target to the API's.
func TargetRef(t engine.Target) *commonv1.TargetRef {
	return &commonv1.TargetRef{Namespace: t.Namespace, Name: t.Name, ApiVersion: t.APIVersion, Kind: t.Kind}
}
