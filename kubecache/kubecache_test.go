package kubecache

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

func TestTrimDeployment(t *testing.T) {
	now := metav1.Now()
	replicas := int32(3)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}}
	owners := []metav1.OwnerReference{{APIVersion: "functions.tidal.dev/v1alpha1", Kind: "Function", Name: "d", UID: "f1"}}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: "d", Namespace: "ns", UID: "u1", ResourceVersion: "42", Generation: 7, DeletionTimestamp: &now,
			Labels:          map[string]string{"app": "d"},
			Annotations:     map[string]string{"keep/me": "h", "kubectl.kubernetes.io/last-applied-configuration": `{"big":"manifest"}`},
			OwnerReferences: owners,
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel, Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 7, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}},
	}
	out, err := TrimDeployment("keep/me", "absent")(d)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*appsv1.Deployment)
	want := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: "d", Namespace: "ns", UID: "u1", ResourceVersion: "42", Generation: 7, DeletionTimestamp: &now,
			Labels: map[string]string{"app": "d"}, Annotations: map[string]string{"keep/me": "h"}, OwnerReferences: owners,
		},
		Spec:   appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 7, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, UnavailableReplicas: 1},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("trimmed = %+v\nwant %+v", got, want)
	}
	if out, _ := TrimDeployment()(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}); out.(*appsv1.Deployment).Annotations != nil {
		t.Errorf("annotations kept with none asked for: %v", out.(*appsv1.Deployment).Annotations)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/d", Obj: d}
	if out, err := TrimDeployment()(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone = %v, %v; want it unchanged", out, err)
	}
}
