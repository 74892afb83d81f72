package main

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/actuator/scale"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// handler serves ActuatorService. Requests arrive validated by the server's
// interceptor chain.
type handler struct {
	actuatorv1.UnimplementedActuatorServiceServer
	applier *scale.Applier
	log     *zap.Logger
}

var _ actuatorv1.ActuatorServiceServer = (*handler)(nil)

func newHandler(applier *scale.Applier, log *zap.Logger) *handler {
	return &handler{applier: applier, log: log}
}

func targetOf(ref *commonv1.TargetRef) scale.Target {
	return scale.Target{Namespace: ref.GetNamespace(), Name: ref.GetName(), APIVersion: ref.GetApiVersion(), Kind: ref.GetKind()}
}

func (h *handler) Scale(ctx context.Context, req *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	d := scale.Decision{
		Target:   targetOf(req.GetTarget()),
		Desired:  req.GetDesiredReplicas(),
		Sequence: req.GetDecisionSequence(),
		Reason:   req.GetReason(),
		DryRun:   req.GetDryRun(),
	}
	res, err := h.applier.Apply(ctx, d)
	if err != nil {
		return nil, toStatus(err)
	}
	if res.Changed {
		h.log.Info("scaled", zap.Stringer("target", d.Target), zap.Int32("from", res.Previous),
			zap.Int32("to", res.Applied), zap.Uint64("sequence", d.Sequence), zap.String("reason", d.Reason))
	}
	if res.Stale {
		h.log.Info("stale decision refused", zap.Stringer("target", d.Target),
			zap.Uint64("sequence", d.Sequence), zap.Uint64("last_applied", res.LastSequence))
	}
	return &actuatorv1.ScaleResponse{
		AppliedReplicas:     res.Applied,
		PreviousReplicas:    res.Previous,
		Changed:             res.Changed,
		Stale:               res.Stale,
		LastAppliedSequence: res.LastSequence,
	}, nil
}

func (h *handler) GetScale(ctx context.Context, req *actuatorv1.GetScaleRequest) (*actuatorv1.GetScaleResponse, error) {
	st, err := h.applier.Get(ctx, targetOf(req.GetTarget()))
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

func (h *handler) Deploy(context.Context, *actuatorv1.DeployRequest) (*actuatorv1.DeployResponse, error) {
	return nil, errDeployerNotWired
}

func (h *handler) Undeploy(context.Context, *actuatorv1.UndeployRequest) (*actuatorv1.UndeployResponse, error) {
	return nil, errDeployerNotWired
}

func (h *handler) Update(context.Context, *actuatorv1.UpdateRequest) (*actuatorv1.UpdateResponse, error) {
	return nil, errDeployerNotWired
}
