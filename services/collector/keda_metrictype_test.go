package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/proto/externalscaler"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// scaledObjectCRD is KEDA's ScaledObject as far as the collector reads it:
// its name and group, and a spec of any shape.
const scaledObjectCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: scaledobjects.keda.sh
spec:
  group: keda.sh
  names: {kind: ScaledObject, listKind: ScaledObjectList, plural: scaledobjects, singular: scaledobject}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// TestKEDAMetricTypeFromTheScaledObject: the collector reads the
// metricType KEDA does not send from the ScaledObject a call names, on the
// API server: a trigger following a PodAutoscaler with metricType Value is
// refused naming the field; with AverageValue, and for a ScaledObject that
// does not exist (a caller of its own), it answers.
func TestKEDAMetricTypeFromTheScaledObject(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "scaledobjects.yaml"), []byte(scaledObjectCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRDs(ctx, dir); err != nil {
		t.Fatal(err)
	}
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	createKPA(t, tidal, ns, "web", "web-deployment")
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]any{"scalerAddress": "tidal-collector.tidal-system.svc:9001", "podAutoscaler": "web"}
	for name, mt := range map[string]string{"by-value": "Value", "by-average": "AverageValue"} {
		so := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{
				"scaleTargetRef": map[string]any{"name": "web-deployment"},
				"triggers": []any{
					map[string]any{"type": "cpu", "metricType": "Utilization", "metadata": map[string]any{"value": "50"}},
					map[string]any{"type": "external", "metricType": mt, "metadata": md},
				},
			},
		}}
		if _, err := dyn.Resource(scaledObjectsGVR).Namespace(ns).Create(ctx, so, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	col := runCollector(t, "--kubeconfig", c.Kubeconfig, "--decider-addr", testkit.StartDecider(t).Addr)
	keda := externalscaler.NewExternalScalerClient(dialPlain(t, col))
	trigger := map[string]string{"scalerAddress": "tidal-collector.tidal-system.svc:9001", "podAutoscaler": "web"}

	get := func(name string) error {
		spec, err := keda.GetMetricSpec(ctx, &externalscaler.ScaledObjectRef{Namespace: ns, Name: name, ScalerMetadata: trigger})
		if err == nil && len(spec.GetMetricSpecs()) != 1 {
			t.Errorf("GetMetricSpec for %s: %v; want one metric", name, spec)
		}
		return err
	}
	// Until the collector serves and its informers have the PodAutoscaler.
	testkit.Eventually(t, time.Minute, "the collector answering for ScaledObject by-average", func() bool { return get("by-average") == nil })
	if err := get("not-a-scaledobject"); err != nil {
		t.Errorf("GetMetricSpec for a ScaledObject that does not exist: %v; want the trigger's metric", err)
	}
	err = get("by-value")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ScaledObject "+ns+"/by-value spec.triggers[1].metricType") || !strings.Contains(err.Error(), `"Value"`) {
		t.Errorf("GetMetricSpec with metricType Value: %v, want INVALID_ARGUMENT naming spec.triggers[1].metricType and quoting it", err)
	}
}
