package system

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Sample is one look at a target: what the decider explains, what the
// actuator applied, and what the Deployment has.
type Sample struct {
	Time time.Time
	// Load is the offered rate (requests or records per second).
	Load float64
	// Known is false until the decider holds the target (Explain answers).
	Known bool
	// Decision is the decider's latest decision; Desired -1 when unknown.
	Decision *commonv1.Decision
	Desired  int32
	// KPA and Lag are the decision's inputs (one of them is set).
	KPA *deciderv1.KPAInputs
	Lag *deciderv1.LagInputs
	// Applied is the sequence of the last decision the actuator applied.
	Applied uint64
	// Replicas is the Deployment's spec.replicas, Ready its ready replicas;
	// -1 when the Deployment does not exist (yet).
	Replicas, Ready int32
}

// Observed is the measured load the decision used: the panic-window
// concurrency (or RPS) for KPA, the total lag for lag targets.
func (s Sample) Observed() float64 {
	switch {
	case s.KPA != nil:
		return s.KPA.GetObservedPanic()
	case s.Lag != nil:
		return float64(s.Lag.GetTotalLag())
	}
	return 0
}

// State is a short word for the strategy's state: "panic", "idle" (an idle
// countdown runs, or desired is 0), "error" (the collector could not
// measure), "no-data" (no new measurement since the last decision), or "".
func (s Sample) State() string {
	switch {
	case !s.Known:
		return "unknown"
	case s.Decision.GetPanicking():
		return "panic"
	case s.Lag != nil && strings.Contains(s.Lag.GetMeasureError(), "nothing observed"):
		return "no-data"
	case s.Lag != nil && s.Lag.GetMeasureError() != "":
		return "error"
	case s.KPA != nil && s.KPA.GetMetricError() != "":
		return "no-data"
	case s.Lag != nil && s.Lag.GetIdleDeadline() != nil:
		return "idle"
	case s.Desired == 0:
		return "idle"
	}
	return ""
}

// Observer reads a System's view of targets over gRPC and the Kubernetes
// API, as an operator would with grpcurl and kubectl.
type Observer struct {
	sys      *System
	decider  deciderv1.DeciderServiceClient
	actuator actuatorv1.ActuatorServiceClient
	conns    []*grpc.ClientConn
}

// NewObserver dials the System's decider and actuator; their addresses
// survive restarts, so it keeps working across them.
func (s *System) NewObserver() (*Observer, error) {
	dc, err := s.Decider.Conn()
	if err != nil {
		return nil, err
	}
	ac, err := s.Actuator.Conn()
	if err != nil {
		_ = dc.Close()
		return nil, err
	}
	return &Observer{sys: s, decider: deciderv1.NewDeciderServiceClient(dc), actuator: actuatorv1.NewActuatorServiceClient(ac),
		conns: []*grpc.ClientConn{dc, ac}}, nil
}

// Close closes the connections.
func (o *Observer) Close() {
	for _, c := range o.conns {
		_ = c.Close()
	}
}

// Decider is the decider client.
func (o *Observer) Decider() deciderv1.DeciderServiceClient { return o.decider }

// Actuator is the actuator client.
func (o *Observer) Actuator() actuatorv1.ActuatorServiceClient { return o.actuator }

// Sample looks at one target. A decider that does not know the target (or
// is down) gives a Sample with Known false, not an error; errors are only
// for the Kubernetes API.
func (o *Observer) Sample(ctx context.Context, t Target) (Sample, error) {
	ns, name := t.Ref()
	s := Sample{Time: time.Now(), Load: t.Load(), Desired: -1, Replicas: -1, Ready: -1}
	ref := &commonv1.TargetRef{Namespace: ns, Name: name}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	ex, err := o.decider.Explain(cctx, &deciderv1.ExplainRequest{Target: ref})
	cancel()
	if err == nil {
		s.Known, s.Decision, s.Desired = true, ex.GetDecision(), ex.GetDecision().GetDesiredReplicas()
		s.KPA, s.Lag = ex.GetKpa(), ex.GetLag()
	} else if c := status.Code(err); c != codes.NotFound && c != codes.Unavailable && c != codes.DeadlineExceeded {
		return s, fmt.Errorf("explain %s/%s: %w", ns, name, err)
	}
	cctx, cancel = context.WithTimeout(ctx, time.Second)
	sc, err := o.actuator.GetScale(cctx, &actuatorv1.GetScaleRequest{Target: ref})
	cancel()
	if err == nil {
		s.Applied = sc.GetLastAppliedSequence()
	}
	d, err := o.sys.Cluster.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return s, fmt.Errorf("deployment %s/%s: %w", ns, name, err)
	default:
		s.Replicas, s.Ready = 1, d.Status.ReadyReplicas
		if d.Spec.Replicas != nil {
			s.Replicas = *d.Spec.Replicas
		}
	}
	return s, nil
}

// NextTick returns the next KPA tick after now on the Unix-aligned grid of
// interval, plus offset.
func NextTick(now time.Time, interval, offset time.Duration) time.Time {
	t := now.Truncate(interval).Add(offset)
	for !t.After(now) {
		t = t.Add(interval)
	}
	return t
}

// Follow samples every target once per KPA tick, offset after the tick (so
// the decision of that tick has been applied), until ctx ends, calling
// onSample for each. Sampling errors go to onErr and sampling goes on.
func (o *Observer) Follow(ctx context.Context, targets []Target, interval, offset time.Duration, onSample func(i int, s Sample), onErr func(error)) {
	for {
		next := NextTick(time.Now(), interval, offset)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		for i, t := range targets {
			s, err := o.Sample(ctx, t)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				onErr(err)
				continue
			}
			onSample(i, s)
		}
	}
}
