package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func TestOwner(t *testing.T) {
	fn := schema.GroupVersionKind{Group: "functions.tidal.dev", Version: "v1alpha1", Kind: "Function"}
	ctrl := true
	owned := func(apiVersion, kind string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: apiVersion, Kind: kind, Name: "echo", Controller: &ctrl},
		}}}
	}
	tests := []struct {
		name string
		obj  any
		want cache.ObjectName
		ok   bool
	}{
		{"controlled by a Function", owned("functions.tidal.dev/v1alpha1", "Function"), cache.ObjectName{Namespace: "ns", Name: "echo"}, true},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: owned("functions.tidal.dev/v1alpha1", "Function")}, cache.ObjectName{Namespace: "ns", Name: "echo"}, true},
		{"other kind", owned("apps/v1", "ReplicaSet"), cache.ObjectName{}, false},
		{"other version", owned("functions.tidal.dev/v1", "Function"), cache.ObjectName{}, false},
		{"no controller", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, cache.ObjectName{}, false},
		{"not an object", "ns/p", cache.ObjectName{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Owner(tt.obj, fn)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Owner = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if k, err := Key(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: owned("", "")}); err != nil || k.String() != "ns/p" {
		t.Errorf("Key(tombstone) = %v, %v; want ns/p", k, err)
	}
	if _, err := Key("not an object"); err == nil {
		t.Error("Key of a string succeeded")
	}
}
