package duck

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDeriveReady(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	tests := []struct {
		name  string
		conds []Condition
		want  Condition // Type Ready implied
	}{
		{name: "all true", conds: []Condition{
			{Type: "A", Status: corev1.ConditionTrue}, {Type: "B", Status: corev1.ConditionTrue},
		}, want: Condition{Status: corev1.ConditionTrue}},
		{name: "a dependent missing", conds: []Condition{
			{Type: "A", Status: corev1.ConditionTrue},
		}, want: Condition{Status: corev1.ConditionUnknown}},
		{name: "false beats unknown", conds: []Condition{
			{Type: "A", Status: corev1.ConditionUnknown, Reason: "Queued", LastTransitionTime: at(5)},
			{Type: "B", Status: corev1.ConditionFalse, Reason: "NoTraffic", Message: "idle", LastTransitionTime: at(1)},
		}, want: Condition{Status: corev1.ConditionFalse, Reason: "NoTraffic", Message: "idle"}},
		{name: "latest of two false", conds: []Condition{
			{Type: "A", Status: corev1.ConditionFalse, Reason: "Old", LastTransitionTime: at(1)},
			{Type: "B", Status: corev1.ConditionFalse, Reason: "New", LastTransitionTime: at(2)},
		}, want: Condition{Status: corev1.ConditionFalse, Reason: "New"}},
		{name: "info severity does not count", conds: []Condition{
			{Type: "A", Status: corev1.ConditionTrue}, {Type: "B", Status: corev1.ConditionTrue},
			{Type: "C", Status: corev1.ConditionFalse, Severity: SeverityInfo},
		}, want: Condition{Status: corev1.ConditionTrue}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Status{Conditions: tt.conds}
			s.DeriveReady(t0.Add(time.Minute), "A", "B")
			got := s.Get(ConditionReady)
			if got == nil || got.Status != tt.want.Status || got.Reason != tt.want.Reason || got.Message != tt.want.Message {
				t.Errorf("Ready = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSetKeepsTransitionTimeAndOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s Status
	s.Set(Condition{Type: "Ready", Status: corev1.ConditionTrue}, t0)
	s.Set(Condition{Type: "Active", Status: corev1.ConditionTrue}, t0)
	s.Set(Condition{Type: "Active", Status: corev1.ConditionTrue}, t0.Add(time.Minute))
	if got := s.Get("Active").LastTransitionTime.Time; !got.Equal(t0) {
		t.Errorf("unchanged condition's transition time = %s, want %s", got, t0)
	}
	s.Set(Condition{Type: "Active", Status: corev1.ConditionFalse}, t0.Add(time.Minute))
	if got := s.Get("Active").LastTransitionTime.Time; !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("changed condition's transition time = %s, want %s", got, t0.Add(time.Minute))
	}
	if s.Conditions[0].Type != "Active" || s.Conditions[1].Type != "Ready" {
		t.Errorf("conditions = %v, want sorted by type as Knative keeps them", s.Conditions)
	}
}
