package v1alpha1

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A PodAutoscaler as Knative v1.23's revision reconciler creates it and its
// KPA reconciler writes its status, on the wire.
const wirePA = `{
  "apiVersion": "autoscaling.internal.knative.dev/v1alpha1",
  "kind": "PodAutoscaler",
  "metadata": {
    "name": "hello-00001",
    "namespace": "default",
    "generation": 2,
    "labels": {"serving.knative.dev/revision": "hello-00001", "serving.knative.dev/service": "hello"},
    "annotations": {"autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev", "autoscaling.knative.dev/target": "10"}
  },
  "spec": {
    "containerConcurrency": 5,
    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hello-00001-deployment"},
    "reachability": "Reachable",
    "protocolType": "http1"
  },
  "status": {
    "observedGeneration": 2,
    "conditions": [
      {"type": "Active", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
      {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
      {"type": "SKSReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
      {"type": "ScaleTargetInitialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ],
    "serviceName": "hello-00001",
    "metricsServiceName": "hello-00001-private",
    "desiredScale": 3,
    "actualScale": 2
  }
}`

func TestPodAutoscalerWireFormat(t *testing.T) {
	var pa PodAutoscaler
	if err := json.Unmarshal([]byte(wirePA), &pa); err != nil {
		t.Fatal(err)
	}
	if pa.Class() != ClassKPA || pa.Revision() != "hello-00001" || pa.Spec.ScaleTargetRef.Name != "hello-00001-deployment" ||
		pa.Spec.ContainerConcurrency != 5 || pa.Spec.Reachability != ReachabilityReachable || pa.Spec.ProtocolType != ProtocolHTTP1 {
		t.Errorf("decoded spec = %+v", pa.Spec)
	}
	if !pa.Status.IsTrue(ConditionSKSReady) || *pa.Status.DesiredScale != 3 || *pa.Status.ActualScale != 2 || pa.Status.MetricsServiceName != "hello-00001-private" {
		t.Errorf("decoded status = %+v", pa.Status)
	}
	// Encoding gives back the same document: no field tidal declares is
	// renamed, dropped or added.
	out, err := json.Marshal(&pa)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal([]byte(wirePA), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	delete(got["metadata"].(map[string]any), "creationTimestamp") // metav1 writes null
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestClassDefaultsToKPA(t *testing.T) {
	if got := (&PodAutoscaler{}).Class(); got != ClassKPA {
		t.Errorf("Class() = %q, want %q", got, ClassKPA)
	}
}
