// Package duck is Knative's duck-typed status (knative.dev/pkg apis/duck/v1
// Status and apis.Condition at the version knative.dev/serving v0.50.0
// requires), as it travels on the wire, with the condition bookkeeping tidal
// needs: set a condition, keeping its transition time unless its status,
// reason or message changed, and derive the Ready condition from its
// dependents as a Knative "living" condition set does.
//
// +kubebuilder:object:generate=true
package duck

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionReady is the top-level condition of a living condition set.
const ConditionReady = "Ready"

// Severity says how a condition's failure is read; conditions Ready
// depends on have SeverityError (Knative's ConditionSeverityError is the
// empty string, which the wire omits).
type Severity string

const (
	SeverityError   Severity = ""
	SeverityWarning Severity = "Warning"
	SeverityInfo    Severity = "Info"
)

// Condition is one status condition, in Knative's form: unlike
// metav1.Condition it has a severity, and reason and message may be empty.
type Condition struct {
	Type     string                 `json:"type"`
	Status   corev1.ConditionStatus `json:"status"`
	Severity Severity               `json:"severity,omitempty"`
	// LastTransitionTime is when Status, Reason or Message last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
}

// Status is the status every Knative object embeds inline.
type Status struct {
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	// Annotations is extra state a reconciler keeps in status.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Get returns the condition of type t, or nil.
func (s *Status) Get(t string) *Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// IsTrue reports whether condition t is True.
func (s *Status) IsTrue(t string) bool {
	c := s.Get(t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// Set sets c, with transition time now when its status, reason or message
// changed (or it is new) and the old one otherwise. Conditions stay sorted
// by type, as Knative keeps them.
func (s *Status) Set(c Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	for i := range s.Conditions {
		old := &s.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message && old.Severity == c.Severity {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	i := 0
	for i < len(s.Conditions) && s.Conditions[i].Type < c.Type {
		i++
	}
	s.Conditions = append(s.Conditions, Condition{})
	copy(s.Conditions[i+1:], s.Conditions[i:])
	s.Conditions[i] = c
}

// DeriveReady sets Ready from the dependents as Knative's living condition
// set does: False with the reason and message of the dependent that turned
// False most recently, else Unknown with those of the most recent Unknown
// one (or a missing one), else True.
func (s *Status) DeriveReady(now time.Time, dependents ...string) {
	var worst *Condition
	missing := false
	rank := func(st corev1.ConditionStatus) int {
		switch st {
		case corev1.ConditionFalse:
			return 2
		case corev1.ConditionTrue:
			return 0
		}
		return 1
	}
	for _, t := range dependents {
		c := s.Get(t)
		if c == nil {
			missing = true
			continue
		}
		if c.Severity != SeverityError || rank(c.Status) == 0 {
			continue
		}
		if worst == nil || rank(c.Status) > rank(worst.Status) ||
			rank(c.Status) == rank(worst.Status) && c.LastTransitionTime.After(worst.LastTransitionTime.Time) {
			worst = c
		}
	}
	ready := Condition{Type: ConditionReady, Status: corev1.ConditionTrue}
	switch {
	case worst != nil:
		ready.Status, ready.Reason, ready.Message = worst.Status, worst.Reason, worst.Message
	case missing:
		ready.Status = corev1.ConditionUnknown
	}
	s.Set(ready, now)
}
