package kedascaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/collector/lag"
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
	inline    *Inline
	caller    func(context.Context) string
	log       *zap.Logger
	// scaledObjects, when set, reads the metricType KEDA does not send.
	scaledObjects ScaledObjects

	refused *prometheus.CounterVec

	// mu guards streams, perCaller, perNamespace, calls and polls.
	mu           sync.Mutex
	streams      int
	perCaller    map[string]int
	perNamespace map[string]int
	// calls and polls are the ScaledObject namespaces' token buckets for
	// every call and for inline Kafka calls, at most maxCallers of each.
	calls, polls map[string]*rate.Limiter
}

var _ externalscaler.ExternalScalerServer = (*Server)(nil)

// maxCallers bounds the namespaces whose rates are kept: beyond it one is
// forgotten, and its next call starts with a full bucket.
const maxCallers = 4096

// New returns a Server. caller names a call's caller for the per-caller
// bounds (the authenticated identity, or the peer address). inline serves
// inline Kafka triggers; with nil, or no Triggers, they are UNIMPLEMENTED.
func New(cfg Config, targets Targets, decisions Decisions, inline *Inline, caller func(context.Context) string, reg prometheus.Registerer, log *zap.Logger) *Server {
	if inline == nil {
		inline = &Inline{}
	}
	s := &Server{cfg: cfg, targets: targets, decisions: decisions, inline: inline, caller: caller, log: log,
		perCaller: map[string]int{}, perNamespace: map[string]int{}, calls: map[string]*rate.Limiter{}, polls: map[string]*rate.Limiter{}}
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
		Help: "KEDA calls refused, by reason: server-limit, caller-limit, namespace-limit, watch-limit (streams); namespace-rate (calls over --keda-namespace-call-rate); poll-rate (inline Kafka calls over --keda-poll-rate); other-namespace (a trigger naming another namespace's target).",
	}, []string{"reason"})
	for _, r := range []string{"server-limit", "caller-limit", "namespace-limit", "watch-limit", "namespace-rate", "poll-rate", "other-namespace"} {
		s.refused.WithLabelValues(r)
	}
	return s
}

// trigger reads ref's trigger, refusing with INVALID_ARGUMENT what cannot
// be right: bad metadata; for inline Kafka, a ScaledObject without a valid
// namespace and name (its target is named after it) or a broker this
// collector may not reach. A follow trigger naming an object of another
// namespace is PERMISSION_DENIED: one KEDA identity answers every tenant's
// ScaledObjects, so a ScaledObject may learn only about its own
// namespace's targets.
func (s *Server) trigger(ref *externalscaler.ScaledObjectRef) (Trigger, error) {
	if ref == nil {
		return Trigger{}, status.Error(codes.InvalidArgument, "scaledObjectRef: required")
	}
	trig, err := Parse(ref.GetNamespace(), ref.GetScalerMetadata())
	if err != nil {
		return Trigger{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if f := trig.Follow; f != nil && f.Namespace != ref.GetNamespace() {
		s.refused.WithLabelValues("other-namespace").Inc()
		return Trigger{}, status.Errorf(codes.PermissionDenied, "%s: %s of namespace %q: a ScaledObject of namespace %q may follow only its own namespace's PodAutoscalers and Functions",
			field(KeyNamespace), f, commonv1.Prefix(f.Namespace), commonv1.Prefix(ref.GetNamespace()))
	}
	if k := trig.Kafka; k != nil {
		if err := cmp.Or(commonv1.ValidateLabel("scaledObjectRef.namespace", ref.GetNamespace()), commonv1.ValidateSubdomain("scaledObjectRef.name", ref.GetName())); err != nil {
			return Trigger{}, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := refusedBrokers(s.cfg.Brokers, k); err != nil {
			return Trigger{}, err
		}
	}
	return trig, nil
}

// refusedBrokers is INVALID_ARGUMENT naming the first of k's brokers the
// policy refuses, or nil.
func refusedBrokers(p lag.BrokerPolicy, k *Kafka) error {
	if b, refused := p.Refused(k.Brokers); refused {
		return status.Error(codes.InvalidArgument, commonv1.Invalid(field(KeyBootstrapServers), b, "brokers this collector may reach (--kafka-brokers, --allowed-brokers)").Error())
	}
	return nil
}

// follow finds the target a follow trigger follows.
func (s *Server) follow(f Follow) (*commonv1.TargetRef, error) {
	target, err := s.targets.Target(f)
	switch {
	case err == nil:
		return target, nil
	case errors.Is(err, ErrNoObject):
		return nil, status.Errorf(codes.NotFound, "%s: %v", f, err)
	case errors.Is(err, ErrNoLookup):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return nil, status.Errorf(codes.Unavailable, "%s: %v", f, err)
}

// inlineName names an inline trigger in errors.
func inlineName(ref *externalscaler.ScaledObjectRef) string {
	return "inline Kafka trigger of ScaledObject " + ref.GetNamespace() + "/" + ref.GetName()
}

// kafka serves a call for an inline trigger, within the caller's rate and
// Config.CallTimeout: here when this replica measures it, else at the
// replica that does.
func (s *Server) kafka(ctx context.Context, ref *externalscaler.ScaledObjectRef, k *Kafka, call Call) (*commonv1.TargetRef, *Poll, error) {
	if s.inline.Triggers == nil {
		return nil, nil, errNoInline
	}
	// Each may read Kafka, here or at another replica.
	if err := s.take(s.polls, ref.GetNamespace(), s.cfg.PollRate, s.cfg.PollBurst, "poll-rate", "inline Kafka calls", "--keda-poll-rate"); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	return s.inline.serve(ctx, ref.GetNamespace(), ref.GetName(), ref.GetScalerMetadata(), k, call)
}

// take takes a token from namespace ns's bucket in buckets, making it on
// first use; without one the call is refused, counted under reason, as
// more what-calls than flag allows.
func (s *Server) take(buckets map[string]*rate.Limiter, ns string, r float64, burst int, reason, what, flag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := buckets[ns]
	if !ok {
		if len(buckets) >= maxCallers {
			for k := range buckets {
				delete(buckets, k)
				break
			}
		}
		l = rate.NewLimiter(rate.Limit(r), burst)
		buckets[ns] = l
	}
	if l.Allow() {
		return nil
	}
	s.refused.WithLabelValues(reason).Inc()
	return status.Errorf(codes.ResourceExhausted, "%s for the ScaledObjects of namespace %q: more than %s (%g per second, bursts of %d); retry later",
		what, commonv1.Prefix(ns), flag, r, burst)
}

// admit takes a token from the bucket of the ScaledObject's namespace:
// every call and stream costs a decider call or a Kafka read, and one
// tenant's ScaledObjects must not spend what KEDA needs for another's.
func (s *Server) admit(ref *externalscaler.ScaledObjectRef) error {
	return s.take(s.calls, ref.GetNamespace(), s.cfg.CallRate, s.cfg.CallBurst, "namespace-rate", "KEDA calls", "--keda-namespace-call-rate")
}

// admitted reads ref's trigger, then admits the call and checks the
// trigger's metricType: the ScaledObject is read within the namespace's
// calls.
func (s *Server) admitted(ctx context.Context, ref *externalscaler.ScaledObjectRef) (Trigger, error) {
	trig, err := s.trigger(ref)
	if err != nil {
		return Trigger{}, err
	}
	if err := s.admit(ref); err != nil {
		return Trigger{}, err
	}
	return trig, s.checkMetricType(ctx, ref, trig)
}

func decisionStatus(what string, target *commonv1.TargetRef, err error) error {
	switch {
	case errors.Is(err, ErrUnknownTarget) && target.GetKind() == InlineKind:
		// Its collector made it a moment ago; its decider has not heard yet.
		return status.Errorf(codes.Unavailable, "%s: its decider does not hold target %s yet; retry", what, target.Key())
	case errors.Is(err, ErrUnknownTarget):
		return status.Errorf(codes.NotFound, "%s: tidal decides nothing for its target %s (%v)", what, target.Key(), err)
	case errors.Is(err, ErrNoDecision):
		return status.Errorf(codes.Unavailable, "%s: target %s has no decision yet (tidal needs its first measurements); retry", what, target.Key())
	case errors.Is(err, ErrTooManyWatches):
		return status.Errorf(codes.ResourceExhausted, "%s: %v; close a stream or retry later", what, err)
	}
	return status.Errorf(codes.Unavailable, "%s: target %s: %v", what, target.Key(), err)
}

// IsActive says whether the trigger wants the workload running: tidal's
// desired replicas > 0 (follow, riff modes), or KEDA's activity (keda).
func (s *Server) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	trig, err := s.admitted(ctx, ref)
	if err != nil {
		return nil, err
	}
	if k := trig.Kafka; k != nil && k.KEDAMode() {
		_, p, err := s.kafka(ctx, ref, k, CallIsActive)
		if err != nil {
			return nil, err
		}
		return &externalscaler.IsActiveResponse{Result: p.Active}, nil
	}
	d, err := s.decision(ctx, ref, trig)
	if err != nil {
		return nil, err
	}
	return &externalscaler.IsActiveResponse{Result: d.GetDesiredReplicas() > 0}, nil
}

// target is the target a trigger answered from the decider names (follow,
// and inline Kafka in the riff modes, whose target is made sure of first),
// and what errors call it.
func (s *Server) target(ctx context.Context, ref *externalscaler.ScaledObjectRef, trig Trigger) (string, *commonv1.TargetRef, error) {
	if k := trig.Kafka; k != nil {
		target, _, err := s.kafka(ctx, ref, k, CallEnsure)
		return inlineName(ref), target, err
	}
	target, err := s.follow(*trig.Follow)
	return trig.Follow.String(), target, err
}

// decision is the latest decision for a trigger answered from the decider,
// or the status KEDA gets: never a zero standing in for "not known".
func (s *Server) decision(ctx context.Context, ref *externalscaler.ScaledObjectRef, trig Trigger) (*commonv1.Decision, error) {
	what, target, err := s.target(ctx, ref, trig)
	if err != nil {
		return nil, err
	}
	d, err := s.decisions.Latest(ctx, target)
	if err != nil {
		return nil, decisionStatus(what, target, err)
	}
	return d, nil
}

// metricSpec is the trigger's one metric. Against a target of 1 the HPA's
// AverageValue arithmetic, ceil(value / 1), is tidal's desired replicas
// (follow, riff modes); in keda mode it is KEDA's own: the capped total
// lag against lagThreshold.
func metricSpec(trig Trigger) *externalscaler.GetMetricSpecResponse {
	target := int64(1)
	if k := trig.Kafka; k != nil && k.KEDAMode() {
		target = k.Config.LagThreshold
	}
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{
		MetricName: metricNameOf(trig), TargetSize: target, TargetSizeFloat: float64(target),
	}}}
}

func metricNameOf(trig Trigger) string {
	if trig.Kafka != nil {
		return trig.Kafka.MetricName()
	}
	return trig.Follow.MetricName()
}

// GetMetricSpec returns the trigger's metric once its object is found. It
// measures nothing and asks no decider.
func (s *Server) GetMetricSpec(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	if err := s.admit(ref); err != nil {
		return nil, err
	}
	trig, err := s.trigger(ref)
	if err != nil {
		return nil, err
	}
	if err := s.checkMetricType(ctx, ref, trig); err != nil {
		return nil, err
	}
	if trig.Kafka != nil {
		if s.inline.Triggers == nil {
			return nil, errNoInline
		}
	} else if _, err := s.follow(*trig.Follow); err != nil {
		return nil, err
	}
	return metricSpec(trig), nil
}

var errNoInline = status.Error(codes.Unimplemented, "this collector does not serve inline Kafka (bootstrapServers); follow a tidal PodAutoscaler or Function instead")

// GetMetrics returns tidal's desired replicas (follow, riff modes) or, in
// keda mode, KEDA's metric from one poll. A request for another metric is
// refused before anything is read, so it costs no poll.
func (s *Server) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	ref := req.GetScaledObjectRef()
	trig, err := s.admitted(ctx, ref)
	if err != nil {
		return nil, err
	}
	name := metricNameOf(trig)
	if m := req.GetMetricName(); m != "" && m != name {
		return nil, status.Error(codes.InvalidArgument, commonv1.Invalid("metricName", m, fmt.Sprintf("this trigger's metric %q (from GetMetricSpec)", name)).Error())
	}
	if k := trig.Kafka; k != nil && k.KEDAMode() {
		_, p, err := s.kafka(ctx, ref, k, CallGetMetrics)
		if err != nil {
			return nil, err
		}
		// KEDA reads metricValueFloat when it is above 0, at milli
		// precision; the lag is whole.
		return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
			MetricName: name, MetricValue: int64(p.Metric), MetricValueFloat: p.Metric,
		}}}, nil
	}
	d, err := s.decision(ctx, ref, trig)
	if err != nil {
		return nil, err
	}
	n := d.GetDesiredReplicas()
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName: name, MetricValue: int64(n), MetricValueFloat: float64(n),
	}}}, nil
}

// acquire takes a place under the bounds for a stream of ctx's caller for
// the ScaledObjects of namespace ns; release gives it back.
func (s *Server) acquire(ctx context.Context, ns string) (release func(), err error) {
	caller := s.caller(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.streams >= s.cfg.MaxStreams:
		s.refused.WithLabelValues("server-limit").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "KEDA stream refused: %d streams are open on this collector (--keda-max-streams); close one or retry later", s.cfg.MaxStreams)
	case s.perCaller[caller] >= s.cfg.MaxStreamsPerCaller:
		s.refused.WithLabelValues("caller-limit").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "KEDA stream refused: this caller has %d streams open (--keda-max-streams-per-caller); close one or retry later", s.cfg.MaxStreamsPerCaller)
	case s.perNamespace[ns] >= s.cfg.MaxStreamsPerNamespace:
		s.refused.WithLabelValues("namespace-limit").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "KEDA stream refused: the ScaledObjects of namespace %q have %d streams open (--keda-max-streams-per-namespace); close one or retry later", commonv1.Prefix(ns), s.cfg.MaxStreamsPerNamespace)
	}
	s.streams++
	s.perCaller[caller]++
	s.perNamespace[ns]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.streams--
		if s.perCaller[caller]--; s.perCaller[caller] <= 0 {
			delete(s.perCaller, caller)
		}
		if s.perNamespace[ns]--; s.perNamespace[ns] <= 0 {
			delete(s.perNamespace, ns)
		}
	}, nil
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
//
// An inline Kafka trigger in a riff mode streams its decider's decisions
// in the same way (KEDA's polls keep its target measured); one in keda
// mode streams KEDA's own activity (streamActivity).
func (s *Server) StreamIsActive(ref *externalscaler.ScaledObjectRef, st externalscaler.ExternalScaler_StreamIsActiveServer) error {
	ctx := st.Context()
	trig, err := s.admitted(ctx, ref)
	if err != nil {
		return err
	}
	if k := trig.Kafka; k != nil && k.KEDAMode() {
		if s.inline.Triggers == nil {
			return errNoInline
		}
		return s.streamActivity(ref, k, st)
	}
	what, target, err := s.target(ctx, ref, trig)
	if err != nil {
		return err
	}
	release, err := s.acquire(ctx, ref.GetNamespace())
	if err != nil {
		return err
	}
	defer release()
	w, err := s.decisions.Watch(target)
	if err != nil {
		if errors.Is(err, ErrTooManyWatches) {
			s.refused.WithLabelValues("watch-limit").Inc()
		}
		return decisionStatus(what, target, err)
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
// a trigger's spec never changes (new metadata is a new trigger).
func (s *Server) StreamMetricSpec(ref *externalscaler.ScaledObjectRef, st externalscaler.ExternalScaler_StreamMetricSpecServer) error {
	ctx := st.Context()
	spec, err := s.GetMetricSpec(ctx, ref)
	if err != nil {
		return err
	}
	release, err := s.acquire(ctx, ref.GetNamespace())
	if err != nil {
		return err
	}
	defer release()
	if err := st.Send(spec); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// streamActivity is StreamIsActive for an inline Kafka trigger in keda
// mode: every Config.StreamPoll it reads the offsets (where the trigger is
// measured, as a call would) and sends KEDA's activity of them, at once
// and then whenever it changes. The reads move none of the polls' state,
// so GetMetrics still answers what KEDA's scaler would. A read that fails
// sends nothing and the stream stays open, as a follow stream does while
// tidal does not know: KEDA's polls say why, and a stream ended with an
// error would make KEDA wait before it opens the next.
func (s *Server) streamActivity(ref *externalscaler.ScaledObjectRef, k *Kafka, st externalscaler.ExternalScaler_StreamIsActiveServer) error {
	ctx := st.Context()
	release, err := s.acquire(ctx, ref.GetNamespace())
	if err != nil {
		return err
	}
	defer release()
	tick := time.NewTicker(s.cfg.StreamPoll)
	defer tick.Stop()
	var sent, active bool
	for {
		_, p, err := s.kafka(ctx, ref, k, CallActivity)
		switch {
		case err == nil && (!sent || p.Active != active):
			if err := st.Send(&externalscaler.IsActiveResponse{Result: p.Active}); err != nil {
				return err
			}
			sent, active = true, p.Active
		case err != nil && ctx.Err() == nil:
			s.log.Debug("KEDA stream: activity not read", zap.String("scaledObject", ref.GetNamespace()+"/"+ref.GetName()), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
