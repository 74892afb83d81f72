package podautoscaler

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A PodAutoscaler's conditions move their transition time as Knative's do
// (knative.dev/pkg apis.ConditionManager): when status, reason or message
// change, at the reconciler's clock, to the second. meta.SetStatusCondition
// moves it only with the status and reads the wall clock, so it is not
// used here.

// setCondition sets c, moving its transition time to now only when its
// status, reason or message changed.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	if old := meta.FindStatusCondition(*conds, c.Type); old != nil &&
		old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		keepTransition(conds, c)
		return
	}
	setConditionAt(conds, c, now)
}

// setConditionAt sets c with transition time now.
func setConditionAt(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	if old := meta.FindStatusCondition(*conds, c.Type); old != nil {
		*old = c
		return
	}
	*conds = append(*conds, c)
}

// keepTransition sets c, keeping the transition time of the condition it
// replaces.
func keepTransition(conds *[]metav1.Condition, c metav1.Condition) {
	old := meta.FindStatusCondition(*conds, c.Type)
	c.LastTransitionTime = old.LastTransitionTime
	*old = c
}
