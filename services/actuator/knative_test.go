package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/actuator/knative"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/knativeconfig"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
)

// TestKnativeMode runs the binary with --knative under a ServiceAccount
// bound to exactly the actuator's rules and the Knative reconciler's: a
// Knative PodAutoscaler gets its ServerlessService, and a Scale call for its
// Deployment goes to the Knative reconciler (recorded in the
// PodAutoscaler's status, the SKS in Serve mode), not to tidal's plain path.
func TestKnativeMode(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := knativetest.InstallCRDs(ictx, c); err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	// The test's namespace stands for knative-serving: its config-autoscaler
	// is followed under a Role of exactly knativeconfig.Rules().
	bindRole(t, c, ns, "tidal-actuator", knativeconfig.Rules())
	var err error
	asCfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: knativeconfig.NameAutoscaler, Namespace: ns}, Data: map[string]string{"max-scale": "5"}}
	if asCfg, err = c.Client.CoreV1().ConfigMaps(ns).Create(ctx, asCfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := startActuator(t, restrictedKubeconfig(t, c, ns, knative.Rules()...), "--knative", "--knative-namespace", ns)
	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}

	// A Revision as Knative makes it; its ServerlessService, created by
	// the actuator, made Ready as Knative's controller would.
	knativetest.Revision(ctx, t, c, ns, "rev-a", "rev-a", nil)
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	ref := &commonv1.TargetRef{Namespace: ns, Name: "rev-a", ApiVersion: "apps/v1", Kind: "Deployment"}
	seq := uint64(time.Now().UnixMilli())
	ebc := 3.0
	resp, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: ref, DesiredReplicas: 2, DecisionSequence: seq, Reason: "test", ExcessBurstCapacity: &ebc})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetChanged() || resp.GetAppliedReplicas() != 2 {
		t.Errorf("Scale = %v, want 2 applied", resp)
	}
	got, err := kn.PodAutoscalers(ns).Get(ctx, "rev-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.DesiredScale == nil || *got.Status.DesiredScale != 2 || got.Status.Annotations[knative.AnnotationDecision] == "" {
		t.Errorf("podautoscaler status after Scale: desiredScale %v, annotations %v; want 2 and the decision recorded", got.Status.DesiredScale, got.Status.Annotations)
	}
	poll("SKS in Serve mode", func() bool {
		s, err := kn.ServerlessServices(ns).Get(ctx, "rev-a", metav1.GetOptions{})
		return err == nil && s.Spec.Mode == knnetworking.ModeServe
	})
	gs, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: ref})
	if err != nil {
		t.Fatal(err)
	}
	if gs.GetReplicas() != 2 || gs.GetLastAppliedSequence() != seq || gs.GetLastReason() != "test" {
		t.Errorf("GetScale = %v, want 2 replicas, sequence %d, reason test", gs, seq)
	}

	// config-autoscaler's max-scale bounds a decision (the actuator refuses
	// one above it, naming it); an edit of it applies to the next one, an
	// invalid edit changes nothing and is reported.
	scaleTo := func(want int32) (int32, error) {
		t.Helper()
		seq++
		resp, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: ref, DesiredReplicas: want, DecisionSequence: seq, Reason: "test", ExcessBurstCapacity: &ebc})
		return resp.GetAppliedReplicas(), err
	}
	refusedOver := func(want int32, maxScale string) bool {
		_, err := scaleTo(want)
		return status.Code(err) == codes.InvalidArgument && strings.Contains(err.Error(), "has max-scale "+maxScale)
	}
	if got, err := scaleTo(5); err != nil || got != 5 {
		t.Errorf("Scale to 5 with config-autoscaler's max-scale 5: applied %d, %v; want 5", got, err)
	}
	if !refusedOver(6, "5") {
		t.Errorf("Scale to 6 with config-autoscaler's max-scale 5: not refused naming max-scale 5")
	}
	edit := func(data map[string]string) {
		t.Helper()
		asCfg.Data = data
		if asCfg, err = c.Client.CoreV1().ConfigMaps(ns).Update(ctx, asCfg, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	edit(map[string]string{"max-scale": "3"})
	poll("max-scale 3 in effect", func() bool { return refusedOver(4, "3") })
	edit(map[string]string{"max-scale": "-3"})
	var ev corev1.Event
	poll("a Warning Event on config-autoscaler", func() bool {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + knativeconfig.NameAutoscaler})
		if err != nil || len(evs.Items) == 0 {
			return false
		}
		ev = evs.Items[0]
		return true
	})
	if ev.Reason != knativeconfig.EventInvalidConfig || ev.Source.Component != "tidal-actuator" || !strings.Contains(ev.Message, `max-scale "-3"`) {
		t.Errorf("Event %s from %s: %q, want %s from tidal-actuator naming max-scale \"-3\"", ev.Reason, ev.Source.Component, ev.Message, knativeconfig.EventInvalidConfig)
	}
	if !refusedOver(4, "3") {
		t.Errorf("Scale to 4 after an invalid edit: not refused naming the last good max-scale 3")
	}
	if got, err := scaleTo(3); err != nil || got != 3 {
		t.Errorf("Scale to 3 after an invalid edit: applied %d, %v; want 3", got, err)
	}
}

// bindRole binds rules in ns to the ServiceAccount sa of ns.
func bindRole(t *testing.T, c *cluster.Cluster, ns, sa string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
