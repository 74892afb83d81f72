package activator

import (
	"time"

	"go.uber.org/zap"

	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// ScaleTargets looks up the target the Knative PodAutoscaler
// namespace/name scales; found is false when it is not known (yet), and
// err names a PodAutoscaler that names no valid target
// (targets.Discovery.KnativeScaleTarget).
type ScaleTargets func(namespace, name string) (ref *commonv1.TargetRef, found bool, err error)

// ByPodAutoscaler returns the Resolver of Knative mode: a stat names a
// revision, which is its PodAutoscaler's namespace/name (Knative names the
// PodAutoscaler like the Revision, and Knative's autoscaler keys the stats
// it records by it: knative.dev/serving v0.50.0, cmd/autoscaler/main.go and
// pkg/autoscaler/metrics/collector.go), and the target is the
// PodAutoscaler's spec.scaleTargetRef, the target Knative mode measures.
// Stats so land on that target whatever the Deployment is called.
//
// A revision whose PodAutoscaler lookup does not know falls back to
// Knative's naming rule (RevisionDeployment): the activator sends a
// revision's first-request stat at once, which can arrive before the
// informer has delivered the new PodAutoscaler, and the rule names the
// Deployment Knative made for it. Each fallback is counted
// (tidal_collector_activator_resolved_total{by="naming-rule"}) and logged
// at most once a minute.
func ByPodAutoscaler(lookup ScaleTargets, m *Metrics, log *zap.Logger) Resolver {
	limit := logkey.NewLimiter(time.Minute)
	return func(namespace, revision string) (*commonv1.TargetRef, error) {
		ref, found, err := lookup(namespace, revision)
		switch {
		case err != nil:
			return nil, err
		case found:
			m.byPodAutoscaler.Inc()
			return ref, nil
		}
		ref, err = RevisionDeployment(namespace, revision)
		if err != nil {
			return nil, err
		}
		m.byNamingRule.Inc()
		if limit.Allow("fallback", time.Now()) {
			log.Info("activator stat for a revision whose PodAutoscaler is not (yet) known: its target named by Knative's naming rule (logged once a minute)",
				zap.String("namespace", namespace), zap.String("revision", revision), zap.String("target", ref.GetName()))
		}
		return ref, nil
	}
}
