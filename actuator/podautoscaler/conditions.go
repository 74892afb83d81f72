package podautoscaler

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	c := findCondition(conds, typ)
	return c != nil && c.Status == metav1.ConditionTrue
}

// setCondition sets c, moving its transition time to now only when its
// status, reason or message changed.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	if old := findCondition(*conds, c.Type); old != nil &&
		old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		c.LastTransitionTime = old.LastTransitionTime
		*old = c
		return
	}
	setConditionAt(conds, c, now)
}

// setConditionAt sets c with transition time now.
func setConditionAt(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	if old := findCondition(*conds, c.Type); old != nil {
		*old = c
		return
	}
	*conds = append(*conds, c)
}

// keepTransition sets c, keeping its previous transition time.
func keepTransition(conds *[]metav1.Condition, c metav1.Condition) {
	old := findCondition(*conds, c.Type)
	c.LastTransitionTime = old.LastTransitionTime
	*old = c
}
