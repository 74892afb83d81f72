package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knative.dev/pkg/apis"
	asv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/system"
)

// tick is the deciders' KPA decision interval (Knative's 2 s).
const tick = 2 * time.Second

// TestLiveConfig edits knative-serving/config-autoscaler as an operator
// does (`kubectl edit`) under a running Revision: the target, the stable
// window and enable-scale-to-zero each change tidal's decisions within two
// ticks of the edit, with no restart; an invalid edit changes nothing and
// is reported by the collector and the actuator (a metric each, a Warning
// Event on the ConfigMap). The ConfigMap is put back as it was when the
// test ends.
func TestLiveConfig(t *testing.T) {
	s := startScene(t)
	ctx := context.Background()
	obs, err := s.tidal.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	cms := s.c.Client.CoreV1().ConfigMaps(systemNamespace)
	orig, err := cms.Get(ctx, "config-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cm, err := cms.Get(context.Background(), "config-autoscaler", metav1.GetOptions{})
		if err == nil {
			cm.Data = orig.Data
			_, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("put config-autoscaler back: %v", err)
		}
	})
	// edit sets keys over the scene's config-autoscaler (Knative's manifest
	// with the scene's keys) and returns when the API server has it.
	edit := func(keys map[string]string) time.Time {
		t.Helper()
		cm, err := cms.Get(ctx, "config-autoscaler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = maps.Clone(orig.Data)
		maps.Copy(cm.Data, keys)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	deployment := &commonv1.TargetRef{Namespace: s.ns, Name: s.rev + "-deployment"}
	explain := func() *deciderv1.ExplainResponse {
		ex, err := obs.Decider().Explain(ctx, &deciderv1.ExplainRequest{Target: deployment})
		if err != nil {
			return nil
		}
		return ex
	}
	// decidedWithin waits for a decision (decide_time after since) for
	// which cond holds and fails unless it was made within two ticks of
	// since; it returns the decision's time.
	decidedWithin := func(what string, since time.Time, cond func(*deciderv1.ExplainResponse) bool) {
		t.Helper()
		var at time.Time
		eventually(t, s.kc, 30*time.Second, what, func() (bool, string) {
			ex := explain()
			if ex == nil {
				return false, "the decider does not explain the Revision's Deployment yet"
			}
			at = ex.GetDecision().GetDecideTime().AsTime()
			return at.After(since) && cond(ex), fmt.Sprintf("decision at %s: %v", at.Format(time.TimeOnly), ex)
		})
		// The first tick on the grid after the edit, and the next.
		if late := at.Sub(since); late > 2*tick {
			t.Errorf("%s: decided %s after the edit, want within two ticks (%s)", what, late.Round(time.Millisecond), 2*tick)
		}
		t.Logf("%s: decided %s after the edit", what, at.Sub(since).Round(time.Millisecond))
	}

	s.createService(t, nil)
	s.waitRevisionReady(t)
	// 20 in flight at target 10 × 70 %: ceil(20 / 7) = 3 pods.
	s.rate.Set(20)
	s.reps.waitReady(t, s.kc, kpaWant(20), 90*time.Second, "steady load")

	// The target: container-concurrency-target-default 10 → 5, so
	// ceil(20 / 3.5) = 6 pods. The first decision on the new target is
	// timed; its replicas follow the measured concurrency, which wanders
	// around 20 (21.1 in flight would be 7 pods), so the count is waited
	// for on the Deployment.
	at := edit(map[string]string{"container-concurrency-target-default": "5"})
	decidedWithin("target 5", at, func(ex *deciderv1.ExplainResponse) bool {
		return ex.GetKpa().GetTarget() == 3.5
	})
	s.reps.waitSpec(t, s.kc, 6, 30*time.Second, "target 5")

	// The stable window: 6 s → 12 s, in the decider's inputs and the
	// collector's scrape window alike.
	at = edit(map[string]string{"container-concurrency-target-default": "5", "stable-window": "12s"})
	decidedWithin("stable window 12s", at, func(ex *deciderv1.ExplainResponse) bool {
		return ex.GetKpa().GetStableWindow().AsDuration() == 12*time.Second
	})

	// An invalid edit (a stable window under Knative's 6 s floor, with a
	// target that would change the decision): nothing changes; the
	// collector and the actuator count it, the actuator records an Event.
	refused := func(p *system.Proc, series string) float64 {
		return collectorMetric(t, p, series+`{configmap="config-autoscaler"}`)
	}
	before := explain()
	edit(map[string]string{"container-concurrency-target-default": "50", "stable-window": "2s"})
	eventually(t, s.kc, 30*time.Second, "the invalid edit refused", func() (bool, string) {
		c := refused(s.tidal.Collectors[0], "tidal_collector_knative_config_refused_total")
		a := refused(s.tidal.Actuator, "tidal_actuator_knative_config_refused_total")
		return c == 1 && a == 1, fmt.Sprintf("refused: collector %v, actuator %v", c, a)
	})
	refusedAt := time.Now()
	// Two more decisions, made after both refused it, decide as before.
	eventually(t, s.kc, 30*time.Second, "two decisions after the refusal", func() (bool, string) {
		ex := explain()
		return ex != nil && ex.GetDecision().GetDecideTime().AsTime().After(refusedAt.Add(tick)), "waiting"
	})
	after := explain()
	if got, want := after.GetKpa().GetTarget(), before.GetKpa().GetTarget(); got != want {
		t.Errorf("after an invalid edit: target %v, want the last good %v", got, want)
	}
	if got := after.GetKpa().GetStableWindow().AsDuration(); got != 12*time.Second {
		t.Errorf("after an invalid edit: stable window %v, want the last good 12s", got)
	}
	if got := after.GetDecision().GetDesiredReplicas(); got != 6 {
		t.Errorf("after an invalid edit: desired %d, want 6", got)
	}
	if got := refused(s.tidal.Collectors[0], "tidal_collector_knative_config_stale"); got != 1 {
		t.Errorf("tidal_collector_knative_config_stale = %v, want 1 while the ConfigMap is refused", got)
	}
	evs, err := s.c.Client.CoreV1().Events(systemNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=config-autoscaler"})
	if err != nil {
		t.Fatal(err)
	}
	var warned bool
	for _, ev := range evs.Items {
		warned = warned || ev.Type == corev1.EventTypeWarning && ev.Source.Component == actuatorManager && strings.Contains(ev.Message, `stable-window "2s"`)
	}
	if !warned {
		t.Errorf("no Warning Event from %s naming stable-window \"2s\" on config-autoscaler: %+v", actuatorManager, evs.Items)
	}

	// enable-scale-to-zero false (the other keys back to the scene's): with
	// no load the KPA still decides 0, and the actuator keeps one pod with
	// the Revision active (Knative's handleScaleToZero), past the stable
	// window and the grace period.
	at = edit(map[string]string{"enable-scale-to-zero": "false"})
	decidedWithin("the scene's keys again", at, func(ex *deciderv1.ExplainResponse) bool {
		return ex.GetKpa().GetStableWindow().AsDuration() == stableWindow && ex.GetKpa().GetTarget() == target*utilization
	})
	s.rate.Set(0)
	idleFrom := time.Now()
	eventually(t, s.kc, 90*time.Second, "decisions of 0 past the window and the grace period", func() (bool, string) {
		ex := explain()
		if ex == nil {
			return false, "no decision"
		}
		decided := ex.GetDecision().GetDecideTime().AsTime()
		return ex.GetDecision().GetDesiredReplicas() == 0 && decided.After(idleFrom.Add(stableWindow+gracePeriod+2*tick)),
			fmt.Sprintf("decision at %s: %v", decided.Format(time.TimeOnly), ex.GetDecision())
	})
	if lo, _ := s.reps.bounds(idleFrom); lo < 1 {
		t.Errorf("with enable-scale-to-zero false the Deployment went to %d", lo)
	}
	if c := s.paActive(t); c == nil || !c.IsTrue() {
		t.Errorf("with enable-scale-to-zero false the PodAutoscaler's Active condition is %+v, want True", c)
	}

	// enable-scale-to-zero true: the actuator takes the Revision inactive
	// at once (its Active condition turns False), and to zero after the
	// grace period.
	at = edit(map[string]string{"enable-scale-to-zero": "true"})
	var inactiveAt time.Time
	eventually(t, s.kc, 30*time.Second, "the PodAutoscaler inactive", func() (bool, string) {
		c := s.paActive(t)
		if c == nil || !c.IsFalse() {
			return false, fmt.Sprintf("Active %+v", c)
		}
		inactiveAt = c.LastTransitionTime.Inner.Time
		return true, ""
	})
	// The condition's time has whole seconds.
	if late := inactiveAt.Sub(at); late > 2*tick || late < -time.Second {
		t.Errorf("enable-scale-to-zero true: inactive %s after the edit, want within two ticks (%s)", late.Round(time.Millisecond), 2*tick)
	}
	t.Logf("enable-scale-to-zero true: inactive %s after the edit", inactiveAt.Sub(at).Round(time.Second))
	s.reps.waitSpec(t, s.kc, 0, 60*time.Second, "scale to zero once enabled")
}

// paActive returns the Revision's PodAutoscaler's Active condition.
func (s *scene) paActive(t *testing.T) *apis.Condition {
	t.Helper()
	pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(context.Background(), s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pa.Status.GetCondition(asv1alpha1.PodAutoscalerConditionActive)
}
