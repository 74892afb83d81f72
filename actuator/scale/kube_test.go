package scale

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func TestKubeScalesDeployment(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("web", nil, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	tgt := Target{Namespace: ns, Name: "web"}
	for _, want := range []int32{5, 2, 0, 3} {
		if err := k.SetReplicas(ctx, tgt, want); err != nil {
			t.Fatalf("SetReplicas(%d): %v", want, err)
		}
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *d.Spec.Replicas; got != want {
			t.Errorf("deployment replicas = %d, want %d", got, want)
		}
		s, err := k.GetScale(ctx, tgt)
		if err != nil {
			t.Fatal(err)
		}
		if s.Replicas != want || s.Selector != "app=web" {
			t.Errorf("GetScale = %+v, want replicas %d, selector app=web", s, want)
		}
	}
	// The same value again writes nothing: the generation (bumped by every
	// spec write, unlike the controller's status writes) stays.
	before, _ := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err := k.SetReplicas(ctx, tgt, 3); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if before.Generation != after.Generation {
		t.Errorf("idempotent SetReplicas wrote: generation %d → %d", before.Generation, after.Generation)
	}
}

func TestKubeRetriesConflict(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("web", nil, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	// Between the first read and write, another writer changes the
	// Deployment: the write must conflict, be retried, and win.
	calls := 0
	k.beforeUpdate = func() {
		calls++
		if calls > 1 {
			return
		}
		patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
		if _, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
	}
	if err := k.SetReplicas(ctx, Target{Namespace: ns, Name: "web"}, 4); err != nil {
		t.Fatalf("SetReplicas: %v", err)
	}
	// The Deployment controller's own status writes may add conflicts.
	if calls < 2 {
		t.Errorf("write attempts = %d, want at least 2 (a conflict, then a retry)", calls)
	}
	d, _ := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if *d.Spec.Replicas != 4 || d.Labels["touched"] != "yes" {
		t.Errorf("after retry: replicas %d, labels %v; want 4 and the other writer's label kept", *d.Spec.Replicas, d.Labels)
	}
}

func TestKubeErrors(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	k, err := NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		target Target
		want   error
	}{
		{"missing deployment", Target{Namespace: ns, Name: "nope"}, ErrNotFound},
		{"unknown kind", Target{Namespace: ns, Name: "x", APIVersion: "example.com/v1", Kind: "Nothing"}, ErrNotFound},
		{"no scale subresource", Target{Namespace: ns, Name: "x", APIVersion: "v1", Kind: "ConfigMap"}, ErrNoScaleSubresource},
		{"cluster-scoped", Target{Namespace: ns, Name: "x", APIVersion: "v1", Kind: "Node"}, ErrNoScaleSubresource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := k.GetScale(ctx, tt.target); !errors.Is(err, tt.want) {
				t.Errorf("GetScale error = %v, want %v", err, tt.want)
			}
			if err := k.SetReplicas(ctx, tt.target, 1); !errors.Is(err, tt.want) {
				t.Errorf("SetReplicas error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestKubeScalesCustomResource(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	// Discovery is cached at the first use: install the kind after it to
	// prove the scaler finds kinds installed later.
	k, err := NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	if _, err := k.GetScale(ctx, Target{Namespace: ns, Name: "warm"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("warm-up GetScale: %v", err)
	}
	dir, _ := filepath.Abs("testdata")
	if err := c.InstallCRDs(ctx, dir); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(c.Config())
	gvr := schema.GroupVersionResource{Group: "test.tidal.dev", Version: "v1", Resource: "scalables"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tidal.dev/v1", "kind": "Scalable",
		"metadata": map[string]any{"name": "s"},
		"spec":     map[string]any{"replicas": int64(1)},
	}}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tgt := Target{Namespace: ns, Name: "s", APIVersion: "test.tidal.dev/v1", Kind: "Scalable"}
	// Retried until discovery finds the new kind.
	testkit.Eventually(t, 10*time.Second, "SetReplicas on a custom resource", func() bool {
		err = k.SetReplicas(ctx, tgt, 7)
		return err == nil
	}, func() string { return fmt.Sprintf("SetReplicas on a custom resource: %v", err) })
	got, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 7 {
		t.Errorf("spec.replicas = %d, want 7", r)
	}
}
