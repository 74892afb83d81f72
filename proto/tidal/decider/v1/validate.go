package deciderv1

// Validate methods for the requests of DeciderService, called by the
// services' validation interceptor before any handler runs. Ingest checks
// only the batch's structure here: a bad sample inside a good batch is
// dropped and counted by the decider, not allowed to end the stream.

import (
	"fmt"
	"maps"
	"slices"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Bounds of a TargetSpec's annotations. A strategy reads a few dozen keys
// with short values; the largest is lagconfig's partitionLimitation, at
// most 4096 bytes. Collectors apply the same bounds before they send
// (ValidateAnnotations), so a spec never ends an Ingest stream.
const (
	MaxAnnotations      = 64
	MaxAnnotationKey    = 317 // a Kubernetes annotation key: a 253-byte prefix, '/', a 63-byte name
	MaxAnnotationValue  = 4096
	MaxAnnotationsTotal = 65536 // keys and values together
)

// Bounds of TargetMetrics.measure_error. The decider keeps the first
// MaxMeasureError bytes; a longer error says nothing more a person reads.
// Above MaxMeasureErrorHard the batch is refused, as no collector sends that.
const (
	MaxMeasureError     = 1024
	MaxMeasureErrorHard = 16384
)

// MaxContainerConcurrency bounds TargetSpec.container_concurrency.
const MaxContainerConcurrency = 100000

// Validate implements the validation interceptor's contract.
func (r *IngestRequest) Validate() error {
	if id := r.GetCollectorId(); id == "" || len(id) > 253 {
		return commonv1.Invalid("collector_id", id, "1 to 253 bytes")
	}
	for i, s := range r.GetSpecs() {
		if err := s.ValidateField(fmt.Sprintf("specs[%d]", i)); err != nil {
			return err
		}
	}
	for i, m := range r.GetMetrics() {
		// The path is built only for a refusal: this runs for every metric.
		f := func() string { return fmt.Sprintf("metrics[%d]", i) }
		if !m.GetTarget().Valid() {
			return m.GetTarget().ValidateField(f() + ".target")
		}
		if m.ReadyPods != nil && !commonv1.IsPods(m.GetReadyPods()) {
			return commonv1.ValidatePods(f()+".ready_pods", m.GetReadyPods())
		}
		if e := m.GetMeasureError(); len(e) > MaxMeasureErrorHard {
			return commonv1.Invalid(f()+".measure_error", e, fmt.Sprintf("at most %d bytes (the decider keeps %d)", MaxMeasureErrorHard, MaxMeasureError))
		}
	}
	for i, t := range r.GetRemoved() {
		if err := t.ValidateField(fmt.Sprintf("removed[%d]", i)); err != nil {
			return err
		}
	}
	if c := r.GetScrapesCompleteBefore(); c != nil && !c.IsValid() {
		return commonv1.Invalid("scrapes_complete_before", c, "a valid timestamp")
	}
	if kc := r.GetKnativeConfig(); kc != nil {
		// A ConfigMap's keys are bounded as annotations are: config-autoscaler
		// has about twenty short ones (collectors leave out _example).
		if a := kc.GetAutoscaler(); a != nil {
			if err := ValidateAnnotations("knative_config.autoscaler.data", a.GetData()); err != nil {
				return err
			}
		}
		if d := kc.GetDeployment(); d != nil {
			if err := ValidateAnnotations("knative_config.deployment.data", d.GetData()); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateField checks a target spec at path field. Collectors check their
// specs with it before sending: a refused spec ends the Ingest stream.
func (s *TargetSpec) ValidateField(field string) error {
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
	if cc := s.GetContainerConcurrency(); cc < 0 || cc > MaxContainerConcurrency {
		return commonv1.Invalid(field+".container_concurrency", cc, fmt.Sprintf("0 to %d", MaxContainerConcurrency))
	}
	if _, ok := Reachability_name[int32(s.GetReachability())]; !ok {
		return commonv1.Invalid(field+".reachability", s.GetReachability(), "a known reachability")
	}
	if kr := s.GetKnativeRevision(); kr != nil {
		f := field + ".knative_revision."
		if err := commonv1.ValidateSubdomain(f+"revision", kr.GetRevision()); err != nil {
			return err
		}
		if err := commonv1.ValidateSubdomain(f+"configuration", kr.GetConfiguration()); err != nil {
			return err
		}
		if svc := kr.GetService(); svc != "" {
			if err := commonv1.ValidateSubdomain(f+"service", svc); err != nil {
				return err
			}
		}
	}
	if err := commonv1.ValidateKeepAliveState(field+".keep_alive_state", s.GetKeepAliveState()); err != nil {
		return err
	}
	return ValidateAnnotations(field+".annotations", s.GetAnnotations())
}

// ValidateAnnotations checks a spec's annotations against the bounds above;
// field is their path. Keys are checked in sorted order, so the error names
// the same key every time.
func ValidateAnnotations(field string, ann map[string]string) error {
	if n := len(ann); n > MaxAnnotations {
		return commonv1.Invalid(field, fmt.Sprintf("%d entries", n), fmt.Sprintf("at most %d entries", MaxAnnotations))
	}
	keys := slices.Sorted(maps.Keys(ann))
	total := 0
	for _, k := range keys {
		v := ann[k]
		kf := fmt.Sprintf("%s[%q]", field, commonv1.Prefix(k))
		if k == "" || len(k) > MaxAnnotationKey || !commonv1.IsText(k) {
			return commonv1.Invalid(kf, k, fmt.Sprintf("a key of 1 to %d bytes without control characters", MaxAnnotationKey))
		}
		if len(v) > MaxAnnotationValue {
			return commonv1.Invalid(kf, v, fmt.Sprintf("a value of at most %d bytes", MaxAnnotationValue))
		}
		if total += len(k) + len(v); total > MaxAnnotationsTotal {
			return commonv1.Invalid(field, fmt.Sprintf("more than %d bytes", MaxAnnotationsTotal), fmt.Sprintf("keys and values of at most %d bytes together", MaxAnnotationsTotal))
		}
	}
	return nil
}

// Validate implements the validation interceptor's contract.
func (r *GetDecisionRequest) Validate() error { return r.GetTarget().ValidateField("target") }

// Validate implements the validation interceptor's contract.
func (r *ExplainRequest) Validate() error { return r.GetTarget().ValidateField("target") }

// Validate implements the validation interceptor's contract.
func (r *ListDecisionsRequest) Validate() error {
	if err := validateNamespaceFilter(r.GetNamespace()); err != nil {
		return err
	}
	return commonv1.ValidatePage(r.GetPageSize(), r.GetPageToken())
}

// Validate implements the validation interceptor's contract.
func (r *WatchDecisionsRequest) Validate() error { return validateNamespaceFilter(r.GetNamespace()) }

func validateNamespaceFilter(ns string) error {
	if ns == "" {
		return nil
	}
	return commonv1.ValidateLabel("namespace", ns)
}
