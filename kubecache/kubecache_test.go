package kubecache

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestDropManagedFields(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name: "d", Labels: map[string]string{"app": "d"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}},
	}}
	out, err := DropManagedFields(d)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*appsv1.Deployment)
	if got.ManagedFields != nil || got.Name != "d" || got.Labels["app"] != "d" {
		t.Errorf("transformed = %+v; want the object without managed fields and nothing else changed", got.ObjectMeta)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/d", Obj: d}
	if out, err := DropManagedFields(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone = %v, %v; want it unchanged", out, err)
	}
}
