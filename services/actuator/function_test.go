package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalfake "github.com/tidalscale/tidal/apis/generated/clientset/versioned/fake"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
)

// TestFunctionOwner: a Deploy request's Deployment is owned by the Function
// object of the same name when there is one, by nothing when there is none,
// and a failed read of the Function fails the request rather than deploying
// an orphan.
func TestFunctionOwner(t *testing.T) {
	existing := &functionsv1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "square", UID: types.UID("uid-1")}}
	tests := []struct {
		name    string
		ref     *actuatorv1.FunctionRef
		getErr  error
		owner   types.UID
		wantErr string
	}{
		{name: "Function exists", ref: &actuatorv1.FunctionRef{Namespace: "ns", Name: "square"}, owner: "uid-1"},
		{name: "no Function of that name", ref: &actuatorv1.FunctionRef{Namespace: "ns", Name: "cube"}},
		{name: "same name in another namespace", ref: &actuatorv1.FunctionRef{Namespace: "other", Name: "square"}},
		{name: "read fails", ref: &actuatorv1.FunctionRef{Namespace: "ns", Name: "square"},
			getErr: errors.New("connection refused"), wantErr: "get function ns/square: connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := tidalfake.NewSimpleClientset(existing)
			if tc.getErr != nil {
				client.PrependReactor("get", "functions", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.getErr
				})
			}
			f := &functionService{tidal: client}
			spec := &actuatorv1.FunctionSpec{Image: "fn:1", Env: map[string]string{"B": "2", "A": "1"}}
			fn, err := f.function(context.Background(), tc.ref, spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fn.OwnerUID != tc.owner {
				t.Errorf("OwnerUID = %q, want %q", fn.OwnerUID, tc.owner)
			}
			// The environment is in key order, so equal requests give equal
			// Deployments.
			if env := fn.Container.Env; len(env) != 2 || env[0].Name != "A" || env[1].Name != "B" {
				t.Errorf("Env = %v, want A then B", env)
			}
		})
	}
}
