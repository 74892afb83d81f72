package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/logkey"
	"github.com/tidalscale/tidal/proto/externalscaler"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Targets finds the tidal target a follow trigger names.
type Targets interface {
	// Target returns the target f's object scales: an error wrapping
	// ErrNoObject when there is no such object, or ErrNoLookup when this
	// collector cannot read such objects.
	Target(f Follow) (*commonv1.TargetRef, error)
}

// Conditions Targets reports.
var (
	// ErrNoObject: the PodAutoscaler or Function does not exist.
	ErrNoObject = errors.New("no such object")
	// ErrNoLookup: this collector reads no such objects (no Kubernetes).
	ErrNoLookup = errors.New("cannot look objects up")
)

// PushTargets is Targets for a collector without Kubernetes
// (--discovery=push): a Function's target is its Deployment of the same
// name, which needs no lookup; a PodAutoscaler's scale target cannot be
// read.
type PushTargets struct{}

// Target implements Targets.
func (PushTargets) Target(f Follow) (*commonv1.TargetRef, error) {
	if f.Kind == KindFunction {
		return &commonv1.TargetRef{Namespace: f.Namespace, Name: f.Name, ApiVersion: "apps/v1", Kind: "Deployment"}, nil
	}
	return nil, fmt.Errorf("%w: %s: this collector runs without Kubernetes (--discovery=push) and cannot read its scale target; name the pushed target's Deployment with %s", ErrNoLookup, f, KeyFunction)
}

// Server serves externalscaler.ExternalScaler.
type Server struct {
	externalscaler.UnimplementedExternalScalerServer

	cfg       Config
	targets   Targets
	decisions Decisions
	caller    func(context.Context) string
	log       *zap.Logger

	refused *prometheus.CounterVec

	// mu guards streams and perCaller.
	mu        sync.Mutex
	streams   int
	perCaller map[string]int
}

var _ externalscaler.ExternalScalerServer = (*Server)(nil)

// New returns a Server. caller names a call's caller for the per-caller
// bound of streams (the authenticated identity, or the peer address).
func New(cfg Config, targets Targets, decisions Decisions, caller func(context.Context) string, reg prometheus.Registerer, log *zap.Logger) *Server {
	s := &Server{cfg: cfg, targets: targets, decisions: decisions, caller: caller, log: log, perCaller: map[string]int{}}
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_collector_keda_streams",
		Help: "KEDA's StreamIsActive and StreamMetricSpec streams open on this collector.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.streams)
	})
	s.refused = f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_collector_keda_streams_refused_total",
		Help: "KEDA streams refused, by reason: server-limit, caller-limit, watch-limit.",
	}, []string{"reason"})
	for _, r := range []string{"server-limit", "caller-limit", "watch-limit"} {
		s.refused.WithLabelValues(r)
	}
	return s
}

// follow reads ref's trigger and finds the target it follows. Inline Kafka
// is refused as not served yet, once its metadata has been checked.
func (s *Server) follow(ref *externalscaler.ScaledObjectRef) (Follow, *commonv1.TargetRef, error) {
	if ref == nil {
		return Follow{}, nil, status.Error(codes.InvalidArgument, "scaledObjectRef: required")
	}
	trig, err := Parse(ref.GetNamespace(), ref.GetScalerMetadata())
	if err != nil {
		return Follow{}, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if trig.Kafka != nil {
		return Follow{}, nil, status.Error(codes.Unimplemented, "inline Kafka (bootstrapServers) is not yet served by this tidal version; its metadata is valid. Follow a tidal PodAutoscaler or Function (podAutoscaler or function) instead")
	}
	f := *trig.Follow
	target, err := s.targets.Target(f)
	switch {
	case err == nil:
		return f, target, nil
	case errors.Is(err, ErrNoObject):
		return f, nil, status.Errorf(codes.NotFound, "%s: %v", f, err)
	case errors.Is(err, ErrNoLookup):
		return f, nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return f, nil, status.Errorf(codes.Unavailable, "%s: %v", f, err)
}

// latest is the target's latest decision, or the status KEDA gets: never a
// zero standing in for "not known".
func (s *Server) latest(ctx context.Context, f Follow, target *commonv1.TargetRef) (*commonv1.Decision, error) {
	d, err := s.decisions.Latest(ctx, target)
	if err == nil {
		return d, nil
	}
	return nil, decisionStatus(f, target, err)
}

func decisionStatus(f Follow, target *commonv1.TargetRef, err error) error {
	switch {
	case errors.Is(err, ErrUnknownTarget):
		return status.Errorf(codes.NotFound, "%s: tidal decides nothing for its target %s (%v)", f, target.Key(), err)
	case errors.Is(err, ErrNoDecision):
		return status.Errorf(codes.Unavailable, "%s: target %s has no decision yet (tidal needs its first measurements); retry", f, target.Key())
	case errors.Is(err, ErrTooManyWatches):
		return status.Errorf(codes.ResourceExhausted, "%s: %v; close a stream or retry later", f, err)
	}
	return status.Errorf(codes.Unavailable, "%s: target %s: %v", f, target.Key(), err)
}

// IsActive says whether tidal wants the target running: desired > 0.
func (s *Server) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	f, target, err := s.follow(ref)
	if err != nil {
		return nil, err
	}
	d, err := s.latest(ctx, f, target)
	if err != nil {
		return nil, err
	}
	return &externalscaler.IsActiveResponse{Result: d.GetDesiredReplicas() > 0}, nil
}

// metricSpec is the follow trigger's one metric: tidal's desired replicas
// against a target of 1, so that the HPA's AverageValue arithmetic,
// ceil(value / 1), is tidal's number.
func metricSpec(f Follow) *externalscaler.GetMetricSpecResponse {
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{
		MetricName: f.MetricName(), TargetSize: 1, TargetSizeFloat: 1,
	}}}
}

// GetMetricSpec returns the trigger's metric once its object is found.
func (s *Server) GetMetricSpec(_ context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	f, _, err := s.follow(ref)
	if err != nil {
		return nil, err
	}
	return metricSpec(f), nil
}

// GetMetrics returns tidal's desired replicas for the target.
func (s *Server) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	f, target, err := s.follow(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	name := f.MetricName()
	if m := req.GetMetricName(); m != "" && m != name {
		return nil, status.Error(codes.InvalidArgument, commonv1.Invalid("metricName", m, fmt.Sprintf("this trigger's metric %q (from GetMetricSpec)", name)).Error())
	}
	d, err := s.latest(ctx, f, target)
	if err != nil {
		return nil, err
	}
	n := d.GetDesiredReplicas()
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName: name, MetricValue: int64(n), MetricValueFloat: float64(n),
	}}}, nil
}

// acquire takes a stream's place under the bounds; release gives it back.
func (s *Server) acquire(caller string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.streams >= s.cfg.MaxStreams:
		s.refused.WithLabelValues("server-limit").Inc()
		return status.Errorf(codes.ResourceExhausted, "KEDA stream refused: %d streams are open on this collector (--keda-max-streams); close one or retry later", s.cfg.MaxStreams)
	case s.perCaller[caller] >= s.cfg.MaxStreamsPerCaller:
		s.refused.WithLabelValues("caller-limit").Inc()
		return status.Errorf(codes.ResourceExhausted, "KEDA stream refused: this caller has %d streams open (--keda-max-streams-per-caller); close one or retry later", s.cfg.MaxStreamsPerCaller)
	}
	s.streams++
	s.perCaller[caller]++
	return nil
}

func (s *Server) release(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams--
	if s.perCaller[caller]--; s.perCaller[caller] <= 0 {
		delete(s.perCaller, caller)
	}
}

// StreamIsActive sends the target's activity at once when it is known,
// then again whenever a decision changes it, so that KEDA's external-push
// trigger scales from zero as soon as tidal decides to. Only a trigger
// that cannot be right (bad metadata, no such object) ends it with an
// error. It stays open, sending nothing, while tidal does not know the
// activity: before the target's first decision, before its decider has
// heard of it (a pushed target exists from its first stat, the very moment
// to push true), or while the decider cannot be reached. KEDA still polls
// IsActive, which says why; and a stream ended with an error would make
// KEDA wait up to a minute before it opens the next.
func (s *Server) StreamIsActive(ref *externalscaler.ScaledObjectRef, st externalscaler.ExternalScaler_StreamIsActiveServer) error {
	ctx := st.Context()
	f, target, err := s.follow(ref)
	if err != nil {
		return err
	}
	caller := s.caller(ctx)
	if err := s.acquire(caller); err != nil {
		return err
	}
	defer s.release(caller)
	w, err := s.decisions.Watch(target)
	if err != nil {
		if errors.Is(err, ErrTooManyWatches) {
			s.refused.WithLabelValues("watch-limit").Inc()
		}
		return decisionStatus(f, target, err)
	}
	defer w.Close()

	var (
		sent, active bool
		seq          uint64
	)
	// push sends d's activity if d is newer than what was sent and changes it.
	push := func(d *commonv1.Decision) error {
		if d == nil || d.GetDesiredReplicas() < 0 || (sent && d.GetSequence() <= seq) {
			return nil
		}
		seq = d.GetSequence()
		a := d.GetDesiredReplicas() > 0
		if sent && a == active {
			return nil
		}
		if err := st.Send(&externalscaler.IsActiveResponse{Result: a}); err != nil {
			return err
		}
		sent, active = true, a
		return nil
	}
	if d, err := s.decisions.Latest(ctx, target); err == nil {
		if err := push(d); err != nil {
			return err
		}
	} else {
		s.log.Debug("KEDA stream opened before its target's activity is known", logkey.Target(target.Key()), zap.Error(err))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Changed():
			if err := push(w.Decision()); err != nil {
				return err
			}
		}
	}
}

// StreamMetricSpec sends the trigger's metric spec, then holds the stream:
// a follow trigger's spec never changes.
func (s *Server) StreamMetricSpec(ref *externalscaler.ScaledObjectRef, st externalscaler.ExternalScaler_StreamMetricSpecServer) error {
	ctx := st.Context()
	f, _, err := s.follow(ref)
	if err != nil {
		return err
	}
	caller := s.caller(ctx)
	if err := s.acquire(caller); err != nil {
		return err
	}
	defer s.release(caller)
	if err := st.Send(metricSpec(f)); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
