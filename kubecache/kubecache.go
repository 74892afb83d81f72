// Package kubecache holds the informer transforms that keep tidal's caches
// small: at 10,000 targets the actuator and the collector cache tens of
// thousands of objects, and most of an object's metadata is bookkeeping that
// nothing in tidal reads.
package kubecache

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DropManagedFields is an informer transform that removes an object's
// managed fields (server-side apply's record of who owns which field, a
// large part of a cached object). Writes built from a cached copy then carry
// no managedFields, which the API server takes as "leave them as they are".
// A tombstone passes unchanged.
func DropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// TrimDeployment returns an informer transform that keeps of a Deployment
// what the actuator reads: identity, labels and owners (whose it is),
// deletion, the annotations named by keep, spec.replicas and the selector
// (its scale), and the replica counts and observed generation of its
// status. The pod template, the strategy, the conditions and every other
// annotation (kubectl's last-applied configuration among them) go: they are
// most of a cached Deployment, and the actuator writes Deployments only
// through their scale subresource or by applying a whole new spec, never
// from a cached copy. A tombstone passes unchanged.
func TrimDeployment(keep ...string) func(any) (any, error) {
	return func(obj any) (any, error) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return obj, nil
		}
		var ann map[string]string
		for _, k := range keep {
			if v, ok := d.Annotations[k]; ok {
				if ann == nil {
					ann = make(map[string]string, len(keep))
				}
				ann[k] = v
			}
		}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{
				Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion,
				Generation: d.Generation, CreationTimestamp: d.CreationTimestamp, DeletionTimestamp: d.DeletionTimestamp,
				Labels: d.Labels, Annotations: ann, OwnerReferences: d.OwnerReferences,
			},
			Spec: appsv1.DeploymentSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector},
			Status: appsv1.DeploymentStatus{
				ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas, UpdatedReplicas: d.Status.UpdatedReplicas,
				ReadyReplicas: d.Status.ReadyReplicas, AvailableReplicas: d.Status.AvailableReplicas, UnavailableReplicas: d.Status.UnavailableReplicas,
			},
		}, nil
	}
}
