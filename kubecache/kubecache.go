// Package kubecache holds the informer transforms that keep tidal's caches
// small: at 10,000 targets the actuator and the collector cache tens of
// thousands of objects, and most of an object's metadata is bookkeeping that
// nothing in tidal reads.
package kubecache

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
