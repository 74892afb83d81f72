package podautoscaler

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// TestPredictedIdleSkipsTheGrace follows a predictive target through one
// idle period: the policy's 0 takes the last pod without the stable window
// of activity and the 30 s grace (the rules' clock does not move), its
// pre-warm brings one back, and each decision records the policy's memory
// in status.lastDecision, the write that records the decision anyway.
func TestPredictedIdleSkipsTheGrace(t *testing.T) {
	h := newHarness(t, nil)
	h.deployment("timer", 1)
	h.podAutoscaler("timer", "timer", map[string]string{kpaconfig.AnnotationKeepAlive: kpaconfig.KeepAlivePredictiveValue})
	h.readyPods("timer", 1)
	decide := func(seq uint64, desired int32, predicted bool, state string) scale.Result {
		t.Helper()
		res, err := h.ctrl.Scale(context.Background(), Request{
			Decision:       scale.Decision{Target: scale.Target{Namespace: h.ns, Name: "timer"}, Desired: desired, Sequence: seq, Reason: "keep-alive"},
			KeepAliveState: state, PredictedIdle: predicted,
		})
		if err != nil {
			t.Fatalf("Scale(seq %d, %d): %v", seq, desired, err)
		}
		return res
	}
	decide(1000, 1, false, "CAE")
	h.eventually("Active", func() bool {
		return condition(h.get("timer"), autoscalingv1alpha1.PodAutoscalerConditionActive).Status == metav1.ConditionTrue
	})
	// Active for 4 s of a 60 s stable window: Knative's rules would keep
	// the pod for the rest of the window and then the grace.
	h.clock.SetTime(h.clock.Now().Add(4 * time.Second))
	decide(2000, 0, true, "CAEYAQ")
	h.eventually("zero replicas at once", func() bool { return h.replicas("timer") == 0 })
	pa := h.get("timer")
	if d := pa.Status.LastDecision; d == nil || !d.PredictedIdle || d.KeepAliveState != "CAEYAQ" {
		t.Errorf("status.lastDecision = %+v, want predictedIdle and the state", d)
	}
	if got := condition(pa, autoscalingv1alpha1.PodAutoscalerConditionActive); got.Status != metav1.ConditionFalse {
		t.Errorf("Active = %s, want False", got.Status)
	}
	// The pre-warm: one pod, and the memory moves on.
	if res := decide(3000, 1, false, "CAEYAg"); res.Applied != 1 || h.replicas("timer") != 1 {
		t.Fatalf("pre-warm = %+v, replicas %d; want 1", res, h.replicas("timer"))
	}
	if d := h.get("timer").Status.LastDecision; d.PredictedIdle || d.KeepAliveState != "CAEYAg" {
		t.Errorf("status.lastDecision = %+v, want no prediction and the new state", d)
	}

	// Without the prediction, a 0 keeps the pod for the window and the grace.
	h.readyPods("timer", 1)
	h.eventually("Active again", func() bool {
		return condition(h.get("timer"), autoscalingv1alpha1.PodAutoscalerConditionActive).Status == metav1.ConditionTrue
	})
	h.clock.SetTime(h.clock.Now().Add(4 * time.Second))
	if res := decide(4000, 0, false, "CAEYAg"); res.Applied != 1 {
		t.Errorf("an unpredicted 0 = %+v, want the last pod kept", res)
	}
	if got := h.replicas("timer"); got != 1 {
		t.Errorf("replicas %d after an unpredicted 0, want 1 until the grace ends", got)
	}
}
