package targets

import (
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// PodAutoscalerTarget returns the target the PodAutoscaler namespace/name
// scales (its scale target, as the decider knows it), read from the
// informers' cache: any replica can look up any object, whichever buckets
// it owns. The error is the lister's (NotFound when there is none). Call it
// after Start.
func (d *Discovery) PodAutoscalerTarget(namespace, name string) (*commonv1.TargetRef, error) {
	pa, err := d.pas.PodAutoscalers(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return targetRef(pa), nil
}

// FunctionTarget returns the target of the Function namespace/name (its
// Deployment), read from the informers' cache. The error is the lister's
// (NotFound when there is none). Call it after Start.
func (d *Discovery) FunctionTarget(namespace, name string) (*commonv1.TargetRef, error) {
	fn, err := d.functions.Functions(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return functionRef(fn), nil
}
