package targets

import (
	"fmt"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// knativeRef is the target a Knative PodAutoscaler is measured as: its
// spec.scaleTargetRef, in its namespace. syncKnative names the target by
// it and KnativeScaleTarget resolves the activator's stats by it, so that
// stats and scraped samples land on one target.
func knativeRef(pa *knautoscaling.PodAutoscaler) *commonv1.TargetRef {
	r := pa.Spec.ScaleTargetRef
	return &commonv1.TargetRef{Namespace: pa.Namespace, Name: r.Name, ApiVersion: r.APIVersion, Kind: r.Kind}
}

// KnativeScaleTarget returns the target of the Knative PodAutoscaler
// namespace/name as Knative mode measures it (knativeRef), read from the
// informer's cache; any replica can look up any PodAutoscaler, whichever
// buckets it owns. Knative names a Revision's PodAutoscaler like the
// Revision (knative.dev/serving v0.50.0,
// pkg/reconciler/revision/resources/pa.go, MakePA), so a stat that names a
// revision finds its target here whatever the Deployment is called.
//
// found is false when the cache holds no such PodAutoscaler: Knative mode
// is off, the informer has not delivered it yet, or there is none. A
// PodAutoscaler of a class this collector does not measure is returned
// too; the hub does not know its target. err names a scale target that is
// no valid target. Call it after Start.
func (d *Discovery) KnativeScaleTarget(namespace, name string) (ref *commonv1.TargetRef, found bool, err error) {
	if d.crd.Knative == nil {
		return nil, false, nil
	}
	pa, err := knclient.Get[*knautoscaling.PodAutoscaler](d.crd.Knative.GetStore(), namespace, name)
	if err != nil {
		return nil, false, fmt.Errorf("knative podautoscaler %s/%s: %w", commonv1.Prefix(namespace), commonv1.Prefix(name), err)
	}
	if pa == nil {
		return nil, false, nil
	}
	ref = knativeRef(pa)
	if err := ref.ValidateField("spec.scaleTargetRef"); err != nil {
		return nil, true, fmt.Errorf("knative podautoscaler %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	return ref, true, nil
}
