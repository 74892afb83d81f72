package chart_test

import (
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Knative's own autoscaler Service and its Deployment's pod labels, as
// serving-core v0.50.0 ships them (config/core/deployments/autoscaler.yaml).
var (
	knativeServiceSelector = labels.Set{"app": "autoscaler"}
	knativeServicePorts    = map[int32]int32{9090: 9090, 8008: 8008, 8080: 8080} // port → targetPort
	knativeAutoscalerPods  = labels.Set{
		"app": "autoscaler", "app.kubernetes.io/component": "autoscaler",
		"app.kubernetes.io/name": "knative-serving", "app.kubernetes.io/version": "devel",
	}
)

// TestKnativeServiceKept renders docs/knative.md's alternative to deleting
// Knative's `autoscaler` Service (as the Knative Operator would restore
// it): the release in knative-serving with knative.autoscalerService.create
// false and collector.podLabels.app=autoscaler. Knative's own Service then
// selects the collector pods and no other pod of the release, its port 8080
// reaches the collectors' activator port, and nothing of the release
// selects Knative's autoscaler pods (a Deployment whose selector took
// them would fight Knative's over them). The switch with this Service on a
// running Knative is not in `make knative`: its processes stand in for
// pods, with no Service routing between them.
func TestKnativeServiceKept(t *testing.T) {
	t.Parallel()
	m := manifest(render(t, release{name: "tidal", namespace: "knative-serving", set: []string{
		"knative.enabled=true", "knative.autoscalerService.create=false", "collector.podLabels.app=autoscaler",
	}}))
	if m.find("Service", "autoscaler") != nil {
		t.Errorf("knative.autoscalerService.create=false, yet the release renders a Service autoscaler (Helm would refuse Knative's)")
	}
	knative := labels.SelectorFromSet(knativeServiceSelector)
	for _, c := range components {
		dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", "tidal-"+c))
		pods := labels.Set(dep.Spec.Template.Labels)
		if got := knative.Matches(pods); got != (c == "collector") {
			t.Errorf("Knative's Service selects the %s pods (%v) = %v, want %v", c, pods, got, c == "collector")
		}
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		if err != nil {
			t.Fatalf("Deployment %s selector: %v", dep.Name, err)
		}
		if sel.Matches(knativeAutoscalerPods) {
			t.Errorf("Deployment %s's selector %v takes Knative's autoscaler pods", dep.Name, sel)
		}
		if c != "collector" {
			continue
		}
		// Knative's activators dial port 8080 of the Service, which
		// targets port 8080 of the pods it selects.
		port, ok := containerPort(dep.Spec.Template.Spec.Containers[0], "activator")
		if !ok || port != knativeServicePorts[8080] {
			t.Errorf("collector activator port %d (present %v), want %d, the target of Knative's Service port 8080", port, ok, knativeServicePorts[8080])
		}
		for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
			if p.ContainerPort != port && slices.Contains(slices.Collect(maps.Values(knativeServicePorts)), p.ContainerPort) {
				t.Errorf("collector port %s (%d) is a target of Knative's Service, which would route its clients to it", p.Name, p.ContainerPort)
			}
		}
	}
	for _, o := range m.ofKind("Service") {
		svc := typed[corev1.Service](t, o)
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(knativeAutoscalerPods) {
			t.Errorf("Service %s selects Knative's autoscaler pods (%v)", svc.Name, svc.Spec.Selector)
		}
	}
}
