package main

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/keepalive"
	"github.com/tidalscale/tidal/decider/sender"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/lag"
)

func targetOf(ref *commonv1.TargetRef) engine.Target {
	return engine.Target{Namespace: ref.GetNamespace(), Name: ref.GetName(), APIVersion: ref.GetApiVersion(), Kind: ref.GetKind()}
}

func specOf(s *deciderv1.TargetSpec) engine.Spec {
	st := engine.KPA
	if s.GetStrategy() == commonv1.Strategy_STRATEGY_LAG {
		st = engine.Lag
	}
	spec := engine.Spec{
		Target:               targetOf(s.GetTarget()),
		Strategy:             st,
		Annotations:          s.GetAnnotations(),
		ContainerConcurrency: s.GetContainerConcurrency(),
		Reachable:            s.GetReachability() != deciderv1.Reachability_REACHABILITY_UNREACHABLE,
		Advisory:             s.GetAdvisory(),
		KeepAliveState:       s.GetKeepAliveState(),
	}
	if kr := s.GetKnativeRevision(); kr != nil {
		spec.Knative = &engine.KnativeRevision{Revision: kr.GetRevision(), Configuration: kr.GetConfiguration(), Service: kr.GetService()}
	}
	return spec
}

// strategies are the API's strategies; any other is unspecified.
var strategies = map[engine.Strategy]commonv1.Strategy{engine.KPA: commonv1.Strategy_STRATEGY_KPA, engine.Lag: commonv1.Strategy_STRATEGY_LAG}

func decisionOf(d engine.Decision) *commonv1.Decision {
	return &commonv1.Decision{
		Target:              sender.TargetRef(d.Target),
		Sequence:            d.Sequence,
		DesiredReplicas:     d.Desired,
		Strategy:            strategies[d.Strategy],
		Reason:              d.Reason,
		Panicking:           d.Panicking,
		ExcessBurstCapacity: float64(d.ExcessBurstCapacity),
		DecideTime:          tsOrNil(d.At),
	}
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func explainOf(d engine.Decision) *deciderv1.ExplainResponse {
	resp := &deciderv1.ExplainResponse{Decision: decisionOf(d)}
	switch {
	case d.KPA != nil:
		k := d.KPA
		in := &deciderv1.KPAInputs{
			Metric:              k.Metric.String(),
			ObservedStable:      k.ObservedStable,
			ObservedPanic:       k.ObservedPanic,
			StableWindow:        durationpb.New(k.StableWindow),
			PanicWindow:         durationpb.New(k.PanicWindow),
			ReadyPods:           k.ReadyPods,
			Target:              k.TargetValue,
			Total:               k.TotalValue,
			PanicThreshold:      k.PanicThreshold,
			RawStable:           k.RawStable,
			RawPanic:            k.RawPanic,
			PanicStartTime:      tsOrNil(k.PanicStart()),
			DesiredStable:       k.DesiredStable,
			DesiredPanic:        k.DesiredPanic,
			MaxScaleUp:          k.MaxScaleUp,
			MaxScaleDown:        k.MaxScaleDown,
			TargetBurstCapacity: k.TargetBurstCapacity,
			MaxPanicPods:        k.MaxPanicPods,
			OverThreshold:       k.OverThreshold,
			Trigger:             k.Trigger.String(),
		}
		if !k.Valid() {
			in.MetricError = k.Invalid.String()
			if d.MeasureError != "" {
				in.MetricError += ": " + d.MeasureError
			}
		}
		resp.Inputs = &deciderv1.ExplainResponse_Kpa{Kpa: in}
		for _, c := range k.Clamps() {
			resp.Clamps = append(resp.Clamps, &deciderv1.Clamp{
				Name: c.Kind.String(), Before: c.Before, After: float64(c.After), Detail: c.String(),
			})
		}
		if b := d.Bounded(); b != d.Desired {
			resp.Clamps = append(resp.Clamps, &deciderv1.Clamp{
				Name: "max-scale", Before: float64(d.Desired), After: float64(b),
				Detail: fmt.Sprintf("max-scale: %d → %d (what the actuator is asked for)", d.Desired, b),
			})
		}
	case d.Lag != nil:
		l := d.Lag
		in := &deciderv1.LagInputs{
			Mode:              string(l.Mode),
			PartitionCount:    l.PartitionCount,
			Proposal:          l.Proposal,
			Smoothed:          float64(l.Smoothing.After),
			Cap:               l.Cap,
			CapReason:         l.CapReason.String(),
			Faithful:          l.Faithful,
			MaxLag:            l.MaxLag,
			TotalLag:          l.TotalLag,
			LaggingPartitions: l.LaggingPartitions,
			ReplicasBefore:    l.ReplicasBefore,
			KedaMetric:        l.KEDA.Metric,
			KedaActive:        l.KEDA.Active,
			ScaleNeeded:       l.ScaleNeeded,
		}
		if l.Idle.Counting {
			in.IdleDeadline = tsOrNil(l.Idle.Deadline)
		}
		switch {
		case d.MeasureError != "":
			in.MeasureError = d.MeasureError
		case l.Err != nil:
			in.MeasureError = l.Err.Error()
		}
		if l.ObservedKnown {
			in.ObservedReplicas = &l.ObservedReplicas
		}
		for _, p := range l.Partitions {
			ps := &deciderv1.PartitionState{
				Partition: p.ID, EndOffset: p.End, Lag: p.Lag, LagWithPersistent: p.LagWithPersistent, Rule: p.Rule.String(), Topic: p.Topic,
			}
			if p.HasCommitted {
				c := p.Committed
				ps.CommittedOffset = &c
			}
			in.Partitions = append(in.Partitions, ps)
		}
		resp.Inputs = &deciderv1.ExplainResponse_Lag{Lag: in}
		if l.CapReason != lag.CapNone && l.Proposal > l.Cap {
			resp.Clamps = append(resp.Clamps, &deciderv1.Clamp{
				Name: "cap", Before: float64(l.Proposal), After: float64(l.Cap),
				Detail: "cap (" + l.CapReason.String() + ")",
			})
		}
	}
	if ka := d.KeepAlive; ka != nil {
		resp.KeepAlive = keepAliveOf(ka)
	}
	return resp
}

func keepAliveOf(ka *keepalive.Decision) *deciderv1.KeepAliveInputs {
	p := &ka.Prediction
	in := &deciderv1.KeepAliveInputs{
		Phase:          ka.Phase.String(),
		Reason:         ka.Reason(),
		KnativeDesired: ka.Knative,
		Desired:        ka.Desired,
		PredictedIdle:  ka.Predicted,
		LastActiveTime: tsOrNil(ka.LastActive),
		Samples:        int32(p.Samples),
		OutOfRange:     int32(p.OutOfRange),
		Cv:             p.CV,
	}
	if p.HeadKnown {
		in.Head = durationpb.New(p.Head)
	}
	if p.TailKnown {
		in.Tail = durationpb.New(p.Tail)
	}
	if p.Predictable() {
		in.PreWarm, in.Until = durationpb.New(p.PreWarm), durationpb.New(p.Until)
	} else {
		in.Fallback = p.Fallback.String()
	}
	return in
}
