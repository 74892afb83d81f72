package collectorv1

// Validate methods for the requests of CollectorService, called by the
// services' validation interceptor before any handler runs.

import (
	"fmt"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// MaxStatsPerMessage bounds one PushStats call or stream message.
const MaxStatsPerMessage = 10000

// Validate implements the validation interceptor's contract.
func (r *PushStatsRequest) Validate() error { return validateStats(r.GetStats()) }

// Validate implements the validation interceptor's contract.
func (r *PushStatsStreamRequest) Validate() error { return validateStats(r.GetStats()) }

// Validate implements the validation interceptor's contract.
func (r *ListTargetsRequest) Validate() error {
	if ns := r.GetNamespace(); ns != "" {
		return commonv1.ValidateLabel("namespace", ns)
	}
	return nil
}

// Validate implements the validation interceptor's contract.
func (r *GetWindowRequest) Validate() error { return r.GetTarget().ValidateField("target") }

func validateStats(stats []*Stat) error {
	if n := len(stats); n == 0 || n > MaxStatsPerMessage {
		return commonv1.Invalid("stats", fmt.Sprintf("%d entries", n), fmt.Sprintf("1 to %d entries", MaxStatsPerMessage))
	}
	for i, s := range stats {
		if err := s.validateField(fmt.Sprintf("stats[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stat) validateField(field string) error {
	if s == nil {
		return commonv1.Invalid(field, "<missing>", "a stat")
	}
	if err := s.GetTarget().ValidateField(field + ".target"); err != nil {
		return err
	}
	if p := s.GetPodName(); p == "" || len(p) > 253 {
		return commonv1.Invalid(field+".pod_name", p, "1 to 253 bytes")
	}
	if err := commonv1.ValidateNonNegative(field+".average_concurrency", s.GetAverageConcurrency()); err != nil {
		return err
	}
	if err := commonv1.ValidatePart(field+".average_proxied_concurrency", s.GetAverageProxiedConcurrency(), s.GetAverageConcurrency()); err != nil {
		return err
	}
	if err := commonv1.ValidateNonNegative(field+".request_count", s.GetRequestCount()); err != nil {
		return err
	}
	return commonv1.ValidatePart(field+".proxied_request_count", s.GetProxiedRequestCount(), s.GetRequestCount())
}
