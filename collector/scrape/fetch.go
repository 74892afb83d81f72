package scrape

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tidalscale/tidal/collector/promtext"
	"github.com/tidalscale/tidal/collector/queuestat"
)

// Failure reasons, the values of the reason label of
// tidal_collector_scrape_failures_total.
const (
	ReasonTimeout     = "timeout"      // no answer within the timeout: a hanging pod
	ReasonConnect     = "connect"      // refused, reset or unreachable
	ReasonVanished    = "vanished"     // the pod left the ready set during the scrape
	ReasonStatus      = "status"       // a non-2xx status
	ReasonContentType = "content-type" // not the format the target declares
	ReasonTooLarge    = "too-large"    // body over the cap
	ReasonMalformed   = "malformed"    // body does not parse
	ReasonBadValue    = "bad-value"    // NaN, infinite, negative, or proxied over total
	ReasonCounter     = "counter"      // a counter's first reading, or a reset: no rate yet
	ReasonSample      = "sample"       // the whole scrape: too few pods answered to fill the sample
)

// FormatKind says what a target's pods serve.
type FormatKind uint8

const (
	// FormatQueueProxy is Knative queue-proxy's protobuf Stat.
	FormatQueueProxy FormatKind = iota
	// FormatText is one gauge or counter in the Prometheus text format.
	FormatText
)

// Format says how to read a pod's metrics.
type Format struct {
	Kind FormatKind
	// Metric is the series name for FormatText.
	Metric string
	// Counter makes a FormatText value a counter whose rate per second is
	// the measurement; otherwise it is a gauge read as it is.
	Counter bool
	// RPS makes a FormatText measurement a request rate; otherwise it is the
	// average concurrency.
	RPS bool
}

// PodStat is one pod's reading, in queue-proxy terms.
type PodStat struct {
	Concurrency, ProxiedConcurrency float64
	Requests, ProxiedRequests       float64
	// Pod and Uptime (seconds) are what the queue-proxy says of itself: a
	// scrape through a Service learns from them which pod answered and
	// whether it is young.
	Pod    string
	Uptime float64
}

// fetchError is a failed pod read with its reason.
type fetchError struct {
	reason string
	err    error
	// mesh is set for an answer a service mesh's proxy gives a plain
	// request it refuses (502 or 503, Knative's
	// IsPotentialMeshErrorResponse).
	mesh bool
}

func (e *fetchError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// asFetchError is err as a *fetchError; any other error counts as a
// failure to connect.
func asFetchError(err error) *fetchError {
	if fe := (*fetchError)(nil); errors.As(err, &fe) {
		return fe
	}
	return &fetchError{reason: ReasonConnect, err: err}
}

func failf(reason, format string, args ...any) *fetchError {
	return &fetchError{reason: reason, err: fmt.Errorf(format, args...)}
}

// fetch reads one pod within timeout. For a counter it returns the raw
// value read, and the caller computes the rate.
func fetch(c *client, x *exchange, addr string, req request, f Format, timeout time.Duration) (PodStat, float64, error) {
	if err := c.do(x, addr, req, time.Now().Add(timeout)); err != nil {
		return PodStat{}, 0, classify(err)
	}
	resp := &x.resp
	if sc := resp.StatusCode(); sc < 200 || sc > 299 {
		fe := failf(ReasonStatus, "status %d", sc)
		fe.mesh = sc == 502 || sc == 503
		return PodStat{}, 0, fe
	}
	return decodeBody(resp.Header.ContentType(), resp.Body(), f)
}

// decodeBody reads one pod's answer: the queue-proxy Stat (exact content
// type, at most queuestat.MaxSize bytes) or one series of Prometheus text.
// It returns the stat, or for text the raw value (a counter's rate needs
// the previous reading). Values the windows must never see are refused.
func decodeBody(ct, body []byte, f Format) (PodStat, float64, error) {
	if f.Kind == FormatQueueProxy {
		if string(ct) != queuestat.ContentType {
			return PodStat{}, 0, failf(ReasonContentType, "content type %q, want %q", clip(ct), queuestat.ContentType)
		}
		if len(body) > queuestat.MaxSize {
			return PodStat{}, 0, failf(ReasonTooLarge, "body of %d bytes, want at most %d", len(body), queuestat.MaxSize)
		}
		s, err := queuestat.Unmarshal(body)
		if err != nil {
			return PodStat{}, 0, &fetchError{reason: ReasonMalformed, err: err}
		}
		ps := PodStat{s.AverageConcurrentRequests, s.AverageProxiedConcurrentRequests, s.RequestCount, s.ProxiedRequestCount, s.PodName, s.ProcessUptime}
		return ps, 0, ps.check()
	}
	if !promtext.IsContentType(string(ct)) {
		return PodStat{}, 0, failf(ReasonContentType, "content type %q, want text/plain", clip(ct))
	}
	v, _, err := promtext.Sum(body, f.Metric)
	if err != nil {
		return PodStat{}, 0, &fetchError{reason: ReasonMalformed, err: err}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return PodStat{}, 0, failf(ReasonBadValue, "%s = %v, want a finite number at least 0", f.Metric, v)
	}
	return PodStat{}, v, nil
}

// check refuses values the windows must never see.
func (s PodStat) check() error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{
		{"average_concurrent_requests", s.Concurrency},
		{"average_proxied_concurrent_requests", s.ProxiedConcurrency},
		{"request_count", s.Requests},
		{"proxied_request_count", s.ProxiedRequests},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return failf(ReasonBadValue, "%s = %v, want a finite number at least 0", f.name, f.v)
		}
	}
	if s.ProxiedConcurrency > s.Concurrency {
		return failf(ReasonBadValue, "average_proxied_concurrent_requests %v over average_concurrent_requests %v", s.ProxiedConcurrency, s.Concurrency)
	}
	if s.ProxiedRequests > s.Requests {
		return failf(ReasonBadValue, "proxied_request_count %v over request_count %v", s.ProxiedRequests, s.Requests)
	}
	return nil
}

func classify(err error) *fetchError {
	reason := ReasonConnect
	switch {
	case isTimeout(err):
		reason = ReasonTimeout
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		reason = ReasonTooLarge
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, syscall.EPIPE):
		// a connection's failure, whatever its text says
	case strings.Contains(err.Error(), "cannot parse"), strings.Contains(err.Error(), "error when reading response headers"):
		reason = ReasonMalformed
	}
	return &fetchError{reason: reason, err: err}
}

func clip(b []byte) string { return string(b[:min(len(b), 64)]) }
