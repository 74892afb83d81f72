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
		if err := commonv1.ValidateLabel("namespace", ns); err != nil {
			return err
		}
	}
	return commonv1.ValidatePage(r.GetPageSize(), r.GetPageToken())
}

// Validate implements the validation interceptor's contract.
func (r *GetWindowRequest) Validate() error { return r.GetTarget().ValidateField("target") }

func validateStats(stats []*Stat) error {
	if n := len(stats); n == 0 || n > MaxStatsPerMessage {
		return commonv1.Invalid("stats", fmt.Sprintf("%d entries", n), fmt.Sprintf("1 to %d entries", MaxStatsPerMessage))
	}
	for i, s := range stats {
		if s.valid() {
			continue
		}
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
	if p := s.GetPodName(); p == "" {
		return commonv1.Invalid(field+".pod_name", p, "1 to 253 bytes")
	}
	if err := commonv1.ValidateText(field+".pod_name", s.GetPodName(), 253); err != nil {
		return err
	}
	if err := commonv1.ValidateCount(field+".average_concurrency", s.GetAverageConcurrency()); err != nil {
		return err
	}
	if err := commonv1.ValidateCountPart(field+".average_proxied_concurrency", s.GetAverageProxiedConcurrency(), s.GetAverageConcurrency()); err != nil {
		return err
	}
	if err := commonv1.ValidateCount(field+".request_count", s.GetRequestCount()); err != nil {
		return err
	}
	return commonv1.ValidateCountPart(field+".proxied_request_count", s.GetProxiedRequestCount(), s.GetRequestCount())
}

// valid is the allocation-free fast path of validateField: PushStats checks
// every stat of every call, and building field paths for valid stats cost
// half the handler's CPU. validateField runs only when this says no.
func (s *Stat) valid() bool {
	if s == nil || s.Target == nil || !commonv1.IsLabel(s.Target.Namespace) || !commonv1.IsSubdomain(s.Target.Name) ||
		!commonv1.IsAPIVersion(s.Target.ApiVersion) || !commonv1.IsKind(s.Target.Kind) ||
		s.PodName == "" || len(s.PodName) > 253 || !commonv1.IsText(s.PodName) {
		return false
	}
	ok := commonv1.IsCount
	return ok(s.AverageConcurrency) && ok(s.AverageProxiedConcurrency) && s.AverageProxiedConcurrency <= s.AverageConcurrency &&
		ok(s.RequestCount) && ok(s.ProxiedRequestCount) && s.ProxiedRequestCount <= s.RequestCount
}
