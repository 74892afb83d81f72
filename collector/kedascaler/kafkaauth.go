package kedascaler

import (
	"errors"
	"net"
	"slices"
	"strings"

	"github.com/tidalscale/tidal/collector/lag"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// parseKafkaAuth reads how an inline trigger reaches its brokers: KEDA's
// kafka keys for TLS, SASL and the protocol version (lag.ParseAuth), the
// secrets among them from the workload's environment (...FromEnv, which
// KEDA resolves and forwards). Errors name the key and quote no value but version's.
func parseKafkaAuth(vals map[string]string, brokers []string) (lag.Auth, error) {
	a, err := lag.ParseAuth(func(k string) string { return vals[k] })
	var ae *lag.AuthError
	if errors.As(err, &ae) {
		want := ae.Want
		if slices.Contains(lag.SecretAuthKeys, ae.Key) {
			want += " (" + ae.Key + fromEnv + ": the variable must be set in the scale target's environment, or KEDA forwards nothing)"
		}
		shown := "(not shown)"
		if ae.Key == "version" {
			shown = vals["version"] // a release, no secret
		}
		return a, commonv1.Invalid(field(ae.Key), shown, want)
	}
	if err != nil {
		return a, commonv1.Invalid("scalerMetadata", "(not shown)", err.Error())
	}
	if a.TokenProvider == lag.TokenAWSMSKIAM {
		// franz-go signs for the region it reads in the broker's host
		// name, as MSK's carry it; a region that is not there would be
		// signed for another.
		for _, b := range brokers {
			host, _, _ := net.SplitHostPort(b)
			if !slices.Contains(strings.Split(host, "."), a.AWSRegion) {
				return a, commonv1.Invalid(field("awsRegion"), a.AWSRegion, "the region in every broker's host name (as MSK's carry it), which AWS MSK IAM signs for; "+host+" has none")
			}
		}
	}
	return a, nil
}
