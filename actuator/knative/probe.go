package knative

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
)

// The activator probe, as Knative's KPA makes it before the last pod goes
// (knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/kpa/scaler.go,
// activatorProbe and paToProbeTarget): GET the PodAutoscaler's public
// Service at /healthz with K-Network-Probe: activator; only the activator
// answers 200 with the body "activator", so success means it is in the
// path.
const (
	probeHeader    = "K-Network-Probe"
	probeValue     = "activator"
	probeUserAgent = "Knative-Autoscaling-Probe"
	probePath      = "/healthz"
	// probeRetry is how soon a PodAutoscaler whose probe failed is
	// reconciled again (Knative's async prober probes every second).
	probeRetry = time.Second
	// maxProbeBody bounds what is read of a probe's answer.
	maxProbeBody = 64
)

// prober probes the activator through a PodAutoscaler's public Service.
type prober struct {
	transport http.RoundTripper
	timeout   time.Duration
	domain    string
}

func newProber(t http.RoundTripper, timeout time.Duration, domain string) *prober {
	if t == nil {
		t = &http.Transport{DisableKeepAlives: true, Proxy: nil}
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return &prober{transport: t, timeout: timeout, domain: domain}
}

// url is the probe's target: the public Service's host name and its port
// for the protocol (80 for http1, 81 for h2c; knative.dev/networking
// pkg/apis/networking/ports.go).
func (p *prober) url(pa *knautoscaling.PodAutoscaler, service string) string {
	port := 80
	if pa.Spec.ProtocolType == knautoscaling.ProtocolH2C {
		port = 81
	}
	host := service + "." + pa.Namespace + ".svc." + p.domain
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + probePath
}

// inPath reports whether the activator answers the probe. No service name
// means no probe, and false.
func (p *prober) inPath(ctx context.Context, pa *knautoscaling.PodAutoscaler, service string) bool {
	if service == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url(pa, service), nil)
	if err != nil {
		return false
	}
	req.Header.Set(probeHeader, probeValue)
	req.Header.Set("User-Agent", probeUserAgent)
	resp, err := p.transport.RoundTrip(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	return err == nil && resp.StatusCode == http.StatusOK && string(body) == probeValue
}
