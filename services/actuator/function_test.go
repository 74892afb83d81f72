package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
)

// TestFunctionOwner: a Deploy request's Deployment is owned by the Function
// object of its name when there is one (from the cache), by nothing when
// there is none, and its environment is in key order, so equal requests
// give equal Deployments.
func TestFunctionOwner(t *testing.T) {
	obj := &functionsv1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "square", UID: types.UID("uid-1")}}
	ref := &actuatorv1.FunctionRef{Namespace: "ns", Name: "square"}
	spec := &actuatorv1.FunctionSpec{Image: "fn:1", Env: map[string]string{"B": "2", "A": "1"}}
	for _, tt := range []struct {
		obj  *functionsv1alpha1.Function
		want types.UID
	}{{obj, "uid-1"}, {nil, ""}} {
		fn := (&functionService{}).function(ref, tt.obj, spec)
		if fn.OwnerUID != tt.want || fn.Namespace != "ns" || fn.Name != "square" {
			t.Errorf("function %s/%s owned by %q, want ns/square owned by %q", fn.Namespace, fn.Name, fn.OwnerUID, tt.want)
		}
		if env := fn.Container.Env; len(env) != 2 || env[0].Name != "A" || env[1].Name != "B" {
			t.Errorf("Env = %v, want A then B", env)
		}
	}
}
