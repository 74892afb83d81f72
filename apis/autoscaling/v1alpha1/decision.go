package v1alpha1

import "encoding/json"

// AnnotationDecision, in a Knative PodAutoscaler's status.annotations, is
// where tidal records the last decision applied to it (JSON of a
// PodAutoscalerDecision), as its own PodAutoscaler records it in
// status.lastDecision: the actuator refuses a decision older than it, and
// the collector hands its keep-alive state back to the decider.
const AnnotationDecision = "autoscaling.tidal.dev/decision"

// DecisionFromAnnotations reads the decision recorded under
// AnnotationDecision; nil when there is none, or when what is there does
// not parse (the next decision replaces it).
func DecisionFromAnnotations(ann map[string]string) *PodAutoscalerDecision {
	var d PodAutoscalerDecision // an absent annotation does not parse
	if err := json.Unmarshal([]byte(ann[AnnotationDecision]), &d); err != nil || d.Sequence <= 0 {
		return nil
	}
	return &d
}
