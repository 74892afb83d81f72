package controller

// Key and Owner map informer events to workqueue keys: an object's own
// name, or the name of the object that controls it. Both unwrap the
// tombstones informers hand over for deletions.

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// Key is obj's namespace/name.
func Key(obj any) (cache.ObjectName, error) {
	name, err := cache.ObjectToName(unwrap(obj))
	if err != nil {
		return cache.ObjectName{}, fmt.Errorf("queue key: %w", err)
	}
	return name, nil
}

// Owner is the name of obj's controller when that controller is of kind
// gvk; ok is false for any other object.
func Owner(obj any, gvk schema.GroupVersionKind) (cache.ObjectName, bool) {
	m, ok := unwrap(obj).(metav1.Object)
	if !ok {
		return cache.ObjectName{}, false
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != gvk.Kind || ref.APIVersion != gvk.GroupVersion().String() {
		return cache.ObjectName{}, false
	}
	return cache.ObjectName{Namespace: m.GetNamespace(), Name: ref.Name}, true
}
