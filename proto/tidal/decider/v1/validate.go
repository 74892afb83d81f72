package deciderv1

// Validate methods for the requests of DeciderService, called by the
// services' validation interceptor before any handler runs. Ingest checks
// only the batch's structure here: a bad sample inside a good batch is
// dropped and counted by the decider, not allowed to end the stream.

import (
	"fmt"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Validate implements the validation interceptor's contract.
func (r *IngestRequest) Validate() error {
	if id := r.GetCollectorId(); id == "" || len(id) > 253 {
		return commonv1.Invalid("collector_id", id, "1 to 253 bytes")
	}
	for i, s := range r.GetSpecs() {
		if err := s.validateField(fmt.Sprintf("specs[%d]", i)); err != nil {
			return err
		}
	}
	for i, m := range r.GetMetrics() {
		f := fmt.Sprintf("metrics[%d]", i)
		if err := m.GetTarget().ValidateField(f + ".target"); err != nil {
			return err
		}
		if m.ReadyPods != nil && m.GetReadyPods() < 0 {
			return commonv1.Invalid(f+".ready_pods", m.GetReadyPods(), "at least 0")
		}
	}
	for i, t := range r.GetRemoved() {
		if err := t.ValidateField(fmt.Sprintf("removed[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *TargetSpec) validateField(field string) error {
	if s == nil {
		return commonv1.Invalid(field, "<missing>", "a target spec")
	}
	if err := s.GetTarget().ValidateField(field + ".target"); err != nil {
		return err
	}
	switch s.GetStrategy() {
	case commonv1.Strategy_STRATEGY_KPA, commonv1.Strategy_STRATEGY_LAG:
	default:
		return commonv1.Invalid(field+".strategy", s.GetStrategy(), "STRATEGY_KPA or STRATEGY_LAG")
	}
	if cc := s.GetContainerConcurrency(); cc < 0 {
		return commonv1.Invalid(field+".container_concurrency", cc, "at least 0")
	}
	if _, ok := Reachability_name[int32(s.GetReachability())]; !ok {
		return commonv1.Invalid(field+".reachability", s.GetReachability(), "a known reachability")
	}
	return nil
}

// Validate implements the validation interceptor's contract.
func (r *GetDecisionRequest) Validate() error { return r.GetTarget().ValidateField("target") }

// Validate implements the validation interceptor's contract.
func (r *ExplainRequest) Validate() error { return r.GetTarget().ValidateField("target") }

// Validate implements the validation interceptor's contract.
func (r *ListDecisionsRequest) Validate() error { return validateNamespaceFilter(r.GetNamespace()) }

// Validate implements the validation interceptor's contract.
func (r *WatchDecisionsRequest) Validate() error { return validateNamespaceFilter(r.GetNamespace()) }

func validateNamespaceFilter(ns string) error {
	if ns == "" {
		return nil
	}
	return commonv1.ValidateLabel("namespace", ns)
}
