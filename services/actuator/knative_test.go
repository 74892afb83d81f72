package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/actuator/knative"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
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

	// A Revision as Knative makes it; its ServerlessService, created by
	// the actuator, made Ready as Knative's controller would.
	knativetest.Revision(ctx, t, c, ns, "rev-a", "rev-a", nil, 30*time.Second)
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
}
