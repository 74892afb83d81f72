package main

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	"github.com/tidalscale/tidal/actuator/deployer"
	"github.com/tidalscale/tidal/actuator/knative"
	"github.com/tidalscale/tidal/actuator/peer"
	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	"github.com/tidalscale/tidal/keyval"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// engine applies decisions: in memory, or through the PodAutoscaler
// controller.
type engine interface {
	Scale(ctx context.Context, req podautoscaler.Request) (scale.Result, error)
	Status(ctx context.Context, t scale.Target) (scale.Status, error)
}

// memoryEngine applies decisions to in-memory replica counts.
type memoryEngine struct{ applier *scale.Applier }

func (m memoryEngine) Scale(ctx context.Context, req podautoscaler.Request) (scale.Result, error) {
	return m.applier.Apply(ctx, req.Decision)
}

func (m memoryEngine) Status(ctx context.Context, t scale.Target) (scale.Status, error) {
	return m.applier.Get(ctx, t)
}

// kubeEngine applies decisions through the PodAutoscaler controller, after
// refusing counts above a function's cap; a target a Knative PodAutoscaler
// scales goes to the Knative reconciler instead (--knative).
type kubeEngine struct {
	pas       *podautoscaler.Controller
	functions *deployer.Controller
	// knative is nil unless --knative.
	knative *knative.Controller
}

func (k *kubeEngine) Scale(ctx context.Context, req podautoscaler.Request) (scale.Result, error) {
	if k.knative != nil {
		ok, err := k.knative.Handles(req.Target)
		if err != nil {
			return scale.Result{}, err
		}
		if ok {
			return k.knative.Scale(ctx, req)
		}
	}
	if err := k.functions.CheckScale(req.Target, req.Desired); err != nil {
		return scale.Result{}, err
	}
	return k.pas.Scale(ctx, req)
}

func (k *kubeEngine) Status(ctx context.Context, t scale.Target) (scale.Status, error) {
	if k.knative != nil {
		ok, err := k.knative.Handles(t)
		if err != nil {
			return scale.Status{}, err
		}
		if ok {
			return k.knative.Status(ctx, t)
		}
	}
	return k.pas.Status(ctx, t)
}

// functionService serves Deploy, Undeploy and Update.
type functionService struct {
	deployer *deployer.Deployer
}

// function converts a request to the Deployer's Function; the Function
// object of the same name, obj, when there is one, becomes the
// Deployment's owner.
func (f *functionService) function(ref *actuatorv1.FunctionRef, obj *functionsv1alpha1.Function, spec *actuatorv1.FunctionSpec) deployer.Function {
	fn := deployer.Function{
		Namespace:     ref.GetNamespace(),
		Name:          ref.GetName(),
		Container:     corev1.Container{Image: spec.GetImage()},
		Input:         spec.GetInputTopic(),
		Output:        spec.GetOutputTopic(),
		Brokers:       keyval.List(spec.GetBrokers()),
		ConsumerGroup: spec.GetConsumerGroup(),
	}
	for _, k := range slices.Sorted(maps.Keys(spec.GetEnv())) {
		fn.Container.Env = append(fn.Container.Env, corev1.EnvVar{Name: k, Value: spec.GetEnv()[k]})
	}
	if obj != nil {
		fn.OwnerUID = obj.UID
	}
	return fn
}

// handler serves ActuatorService. Requests arrive validated by the server's
// interceptor chain.
type handler struct {
	actuatorv1.UnimplementedActuatorServiceServer
	engine    engine
	functions *functionService // nil without a cluster
	// forward sends a decision for a PodAutoscaler another replica owns to
	// that replica; nil when replicas do not share PodAutoscalers.
	forward *peer.Forwarder
	log     *zap.Logger
	now     func() time.Time
	// kinds are the target kinds Scale and GetScale may reach;
	// kindRefused counts refusals (nil until useKinds).
	kinds       *scale.Kinds
	kindRefused prometheus.Counter
	// access is what tidal manages, from the caches; nil without a
	// cluster (--scaler memory), where every target is the caller's.
	access *access
}

var _ actuatorv1.ActuatorServiceServer = (*handler)(nil)

func newHandler(e engine, functions *functionService, log *zap.Logger) *handler {
	return &handler{engine: e, functions: functions, log: log, now: time.Now, kinds: scale.NewKinds()}
}

func targetOf(ref *commonv1.TargetRef) scale.Target {
	return scale.Target{Namespace: ref.GetNamespace(), Name: ref.GetName(), APIVersion: ref.GetApiVersion(), Kind: ref.GetKind()}
}

// budgetWaitShare is the part of a Scale call's time, to its caller's
// deadline, that its pass may wait for the write budget before its first
// write; the rest is for its writes (a status write and a scale patch) and
// the answer. A call the budget cannot serve in time is then answered
// RESOURCE_EXHAUSTED, which the decider takes as deferred and retries with
// its newest decision for the target, instead of timing out in the queue,
// which it would count as a failed call.
const budgetWaitShare = 0.5

// maxSequenceAhead bounds how far a decision's sequence (its decision time
// in Unix milliseconds) may be ahead of this actuator's clock: further out,
// one call would make every real decision stale until that time.
const maxSequenceAhead = 5 * time.Minute

func (h *handler) Scale(ctx context.Context, req *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	if err := h.checkKind("target", req.GetTarget()); err != nil {
		return nil, err
	}
	if limit := uint64(h.now().Add(maxSequenceAhead).UnixMilli()); req.GetDecisionSequence() > limit {
		return nil, status.Errorf(codes.InvalidArgument, "invalid decision_sequence %d: want at most %d (Unix milliseconds, at most %s ahead of the actuator's clock)",
			req.GetDecisionSequence(), limit, maxSequenceAhead)
	}
	if h.access != nil {
		if err := h.access.scalable(req.GetTarget()); err != nil {
			return nil, err
		}
	}
	r := podautoscaler.Request{Decision: scale.Decision{
		Target:   targetOf(req.GetTarget()),
		Desired:  req.GetDesiredReplicas(),
		Sequence: req.GetDecisionSequence(),
		// The reason reaches status, Events and logs: no control characters.
		Reason: commonv1.Printable(req.GetReason()),
		DryRun: req.GetDryRun(),
	}}
	if req.ExcessBurstCapacity != nil {
		e := int32(max(math.MinInt32, min(math.MaxInt32, math.Floor(req.GetExcessBurstCapacity()))))
		r.ExcessBurstCapacity = &e
	}
	r.KeepAliveState, r.PredictedIdle = req.GetKeepAliveState(), req.GetPredictedIdle()
	if c, ok := scaleClasses[req.GetScaleClass()]; ok {
		r.Class = &c
	}
	if deadline, ok := ctx.Deadline(); ok {
		now := h.now()
		ctx = writebudget.WithWaitLimit(ctx, now.Add(time.Duration(float64(deadline.Sub(now))*budgetWaitShare)))
	}
	res, err := h.engine.Scale(ctx, r)
	var notOwner *podautoscaler.NotOwnerError
	if errors.As(err, &notOwner) {
		if h.forward == nil || notOwner.Owner == "" {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return h.forward.Scale(ctx, notOwner.Owner, req)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if res.Changed {
		h.log.Info("scaled", zap.Stringer("target", r.Target), zap.Int32("from", res.Previous),
			zap.Int32("to", res.Applied), zap.Uint64("sequence", r.Sequence), zap.String("reason", r.Reason))
	}
	if res.Stale {
		h.log.Info("stale decision refused", zap.Stringer("target", r.Target),
			zap.Uint64("sequence", r.Sequence), zap.Uint64("last_applied", res.LastSequence))
	}
	return &actuatorv1.ScaleResponse{
		AppliedReplicas:     res.Applied,
		PreviousReplicas:    res.Previous,
		Changed:             res.Changed,
		Stale:               res.Stale,
		LastAppliedSequence: res.LastSequence,
		Recorded:            res.Recorded,
	}, nil
}

func (h *handler) GetScale(ctx context.Context, req *actuatorv1.GetScaleRequest) (*actuatorv1.GetScaleResponse, error) {
	if err := h.checkKind("target", req.GetTarget()); err != nil {
		return nil, err
	}
	if h.access != nil {
		// Anyone of the trust domain may read: only what tidal manages,
		// from the cache (Deployments, StatefulSets), so no loop of reads
		// spends the API budget; other kinds within the live-read budget.
		if err := h.access.scalable(req.GetTarget()); err != nil {
			return nil, err
		}
		if h.access.caches(targetOf(req.GetTarget())) {
			ctx = scale.CacheOnly(ctx)
		} else if err := h.access.liveRead(ctx, req.GetTarget()); err != nil {
			return nil, err
		}
	}
	st, err := h.engine.Status(ctx, targetOf(req.GetTarget()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &actuatorv1.GetScaleResponse{
		Target:              req.GetTarget(),
		Replicas:            st.Replicas,
		LastAppliedSequence: st.LastSequence,
		LastReason:          st.LastReason,
	}
	if !st.LastApplied.IsZero() {
		resp.LastAppliedTime = timestamppb.New(st.LastApplied)
	}
	return resp, nil
}

func (h *handler) Deploy(ctx context.Context, req *actuatorv1.DeployRequest) (*actuatorv1.DeployResponse, error) {
	if h.functions == nil {
		return nil, errDeployerNotWired
	}
	obj, _, err := h.access.function("Deploy", req.GetFunction().GetNamespace(), req.GetFunction().GetName())
	if err != nil {
		return nil, err
	}
	fn := h.functions.function(req.GetFunction(), obj, req.GetSpec())
	name, _, err := h.functions.deployer.Deploy(ctx, &fn)
	if err != nil {
		return nil, toStatus(err)
	}
	return &actuatorv1.DeployResponse{Deployment: name}, nil
}

func (h *handler) Undeploy(ctx context.Context, req *actuatorv1.UndeployRequest) (*actuatorv1.UndeployResponse, error) {
	if h.functions == nil {
		return nil, errDeployerNotWired
	}
	_, exists, err := h.access.function("Undeploy", req.GetFunction().GetNamespace(), req.GetFunction().GetName())
	if err != nil {
		return nil, err
	}
	if !exists {
		return &actuatorv1.UndeployResponse{}, nil
	}
	deleted, err := h.functions.deployer.Undeploy(ctx, req.GetFunction().GetNamespace(), req.GetFunction().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &actuatorv1.UndeployResponse{Deleted: deleted}, nil
}

func (h *handler) Update(ctx context.Context, req *actuatorv1.UpdateRequest) (*actuatorv1.UpdateResponse, error) {
	if h.functions == nil {
		return nil, errDeployerNotWired
	}
	obj, _, err := h.access.function("Update", req.GetFunction().GetNamespace(), req.GetFunction().GetName())
	if err != nil {
		return nil, err
	}
	fn := h.functions.function(req.GetFunction(), obj, req.GetSpec())
	n, err := h.functions.deployer.Update(ctx, &fn, req.Replicas)
	if err != nil {
		return nil, toStatus(err)
	}
	return &actuatorv1.UpdateResponse{Deployment: fn.Name, Replicas: n}, nil
}

// scaleClasses maps the API's classes to the write budget's; unspecified
// and unknown ones are absent.
var scaleClasses = map[actuatorv1.ScaleClass]writebudget.Class{
	actuatorv1.ScaleClass_SCALE_CLASS_WAKE: writebudget.Wake,
	actuatorv1.ScaleClass_SCALE_CLASS_UP:   writebudget.Up,
	actuatorv1.ScaleClass_SCALE_CLASS_DOWN: writebudget.Down,
}
