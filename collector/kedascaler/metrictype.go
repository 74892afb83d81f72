package kedascaler

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/proto/externalscaler"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// ScaledObjectTrigger is one trigger of a ScaledObject, as its spec holds
// it (metadata unresolved: a ...FromEnv key names a variable).
type ScaledObjectTrigger struct {
	Type       string
	MetricType string
	Metadata   map[string]string
}

// ScaledObjects reads KEDA's ScaledObjects. KEDA sends an external scaler
// a trigger's metadata but not its metricType, under which the HPA reads
// the metric: the collector reads that from the ScaledObject.
type ScaledObjects interface {
	// Triggers returns the triggers of ScaledObject namespace/name, or an
	// error when it cannot be read (none, no KEDA CRDs, not allowed).
	Triggers(ctx context.Context, namespace, name string) ([]ScaledObjectTrigger, error)
}

// SetScaledObjects makes the server check, on every call, the metricType
// that the caller's ScaledObject gives the trigger (checkMetricType). Call
// it before serving.
func (s *Server) SetScaledObjects(so ScaledObjects) { s.scaledObjects = so }

// KEDA's metric types (autoscaling/v2 MetricTargetType).
const (
	metricAverageValue = "AverageValue"
	metricValue        = "Value"
	metricUtilization  = "Utilization"
)

// checkMetricType refuses a trigger whose ScaledObject gives it a
// metricType under which the HPA would not land where the answer means.
// Following a tidal target (and an inline trigger in a riff mode) answers
// tidal's desired replicas against a target of 1: AverageValue divides the
// metric by the replicas, ceil(N / 1) = N; Value would multiply the current
// replicas by N. In keda mode the metric and target are KEDA's kafka
// scaler's, so Value scales as it does under KEDA's own trigger. A
// ScaledObject that cannot be read is not checked: KEDA's own calls name
// one that exists, but a cluster without KEDA's CRDs, a collector not
// allowed to read them or a caller of its own (grpcurl) has none to read.
func (s *Server) checkMetricType(ctx context.Context, ref *externalscaler.ScaledObjectRef, trig Trigger) error {
	if s.scaledObjects == nil || ref.GetName() == "" {
		return nil
	}
	triggers, err := s.scaledObjects.Triggers(ctx, ref.GetNamespace(), ref.GetName())
	if err != nil {
		s.log.Debug("KEDA trigger's metricType not checked", zap.String("scaledObject", ref.GetNamespace()+"/"+ref.GetName()), zap.Error(err))
		return nil
	}
	for i, t := range triggers {
		if t.Type != "external" && t.Type != "external-push" {
			continue
		}
		if other, err := Parse(ref.GetNamespace(), t.Metadata); err != nil || !sameTrigger(trig, other) {
			continue
		}
		if want := metricTypeWant(trig, t.MetricType); want != "" {
			field := fmt.Sprintf("ScaledObject %s/%s spec.triggers[%d].metricType", commonv1.Prefix(ref.GetNamespace()), commonv1.Prefix(ref.GetName()), i)
			return status.Error(codes.InvalidArgument, commonv1.Invalid(field, t.MetricType, want).Error())
		}
	}
	return nil
}

// sameTrigger reports whether a and b measure or follow the same thing.
func sameTrigger(a, b Trigger) bool {
	switch {
	case a.Follow != nil && b.Follow != nil:
		return *a.Follow == *b.Follow
	case a.Kafka != nil && b.Kafka != nil:
		return a.Kafka.Hash == b.Kafka.Hash
	}
	return false
}

// metricTypeWant is what trig wants of metricType mt, or "" when mt does.
func metricTypeWant(trig Trigger, mt string) string {
	keda := trig.Kafka != nil && trig.Kafka.KEDAMode()
	switch mt {
	case "", metricAverageValue:
		return ""
	case metricValue:
		if keda {
			return ""
		}
		return metricAverageValue + " (or none): the metric is tidal's desired replicas against a target of 1, which the HPA lands on only when it divides by the replicas; " +
			metricValue + " would multiply the current replicas by it"
	case metricUtilization:
		return metricAverageValue + " or " + metricValue + ": KEDA takes " + metricUtilization + " only for cpu and memory triggers"
	}
	return metricAverageValue + " (the default) or " + metricValue + ", as KEDA takes them for an external trigger"
}
