package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/tidalscale/tidal/actuator/knative"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
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
	client := startActuator(t, restrictedKubeconfig(t, c, ns, knative.Rules()...), "--knative")
	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{knautoscaling.LabelRevision: "rev-a"}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("rev-a", labels, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pa := &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "rev-a", Labels: labels},
		Spec: knautoscaling.PodAutoscalerSpec{
			ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "rev-a"},
			ProtocolType:   knautoscaling.ProtocolHTTP1,
		},
	}
	if _, err := kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("serverlessservice", func() bool {
		_, err := kn.ServerlessServices(ns).Get(ctx, "rev-a", metav1.GetOptions{})
		return err == nil
	})
	// Knative's controller would reconcile the SKS into its Services.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := kn.ServerlessServices(ns).Get(ctx, "rev-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Status.ServiceName, s.Status.PrivateServiceName = "rev-a", "rev-a-private"
		s.Status.Set(duck.Condition{Type: knnetworking.ConditionReady, Status: corev1.ConditionTrue}, time.Now())
		_, err = kn.ServerlessServices(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	poll("podautoscaler ready", func() bool {
		got, err := kn.PodAutoscalers(ns).Get(ctx, "rev-a", metav1.GetOptions{})
		return err == nil && got.Status.IsTrue(knautoscaling.ConditionReady) && got.Status.MetricsServiceName == "rev-a-private"
	})

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
}
