package lag

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/tidalscale/tidal/keyval"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// BrokerPolicy is which Kafka brokers the collector may dial for a lag
// source whose brokers a tenant wrote (a PodAutoscaler's or Metric's
// spec.lag, the Secret it names, a KEDA trigger's bootstrapServers): the
// brokers the operator listed (--kafka-brokers) and those matching
// Patterns (--allowed-brokers). With no patterns, only the listed ones: a
// tenant must not turn the collector into a probe of the cluster network.
type BrokerPolicy struct {
	Listed   []string
	Patterns BrokerPatterns
}

// Allows reports whether the collector may dial addr (host:port).
func (p BrokerPolicy) Allows(addr string) bool {
	return slices.Contains(p.Listed, addr) || slices.ContainsFunc(p.Patterns, func(pat string) bool {
		ok, _ := path.Match(pat, addr)
		return ok
	})
}

// Refused returns the first of brokers the policy refuses, if any.
func (p BrokerPolicy) Refused(brokers []string) (string, bool) {
	for _, b := range brokers {
		if !p.Allows(b) {
			return b, true
		}
	}
	return "", false
}

// Cluster returns c under the policy: an error wrapping
// ErrBrokerNotAllowed and naming the first seed it refuses; else c with
// Allow set, so that the brokers the cluster advertises (and an OAuth token
// endpoint) are checked before every connection too: a fake Kafka cannot
// send the collector elsewhere. Allow stays unset only when every seed is
// one the operator listed and no token endpoint is named: that is the
// operator's own Kafka, whose advertised brokers it need not list.
func (p BrokerPolicy) Cluster(c Cluster) (Cluster, error) {
	if b, refused := p.Refused(c.Brokers); refused {
		return c, fmt.Errorf("broker %q: %w: want one of --kafka-brokers or a match of --allowed-brokers", commonv1.Prefix(b), ErrBrokerNotAllowed)
	}
	if c.Auth.TokenURL != "" || slices.ContainsFunc(c.Brokers, func(b string) bool { return !slices.Contains(p.Listed, b) }) {
		c.Allow = p.Allows
	}
	return c, nil
}

// BrokerPatterns is the --allowed-brokers flag: comma-separated host:port
// patterns (Go path.Match, e.g. *.kafka.svc.cluster.local:9092).
type BrokerPatterns []string

// String implements flag.Value.
func (b *BrokerPatterns) String() string {
	if b == nil {
		return ""
	}
	return strings.Join(*b, ",")
}

// Set implements flag.Value, refusing a malformed pattern.
func (b *BrokerPatterns) Set(v string) error {
	var out BrokerPatterns
	for _, pat := range keyval.List(v) {
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("%q: want host:port patterns (Go path.Match): %w", commonv1.Prefix(pat), err)
		}
		out = append(out, pat)
	}
	*b = out
	return nil
}
