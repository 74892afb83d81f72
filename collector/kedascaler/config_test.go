package kedascaler

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// defaultConfig is the flags' defaults, with args applied.
func defaultConfig(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlagsWithPrefix("keda-", fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Validate("keda-")
}

func TestConfigRefusesUnboundedValues(t *testing.T) {
	if _, err := defaultConfig(t); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--keda-target-ttl", "0s"}, "--keda-target-ttl"},
		{[]string{"--keda-max-targets", "0"}, "--keda-max-targets"},
		{[]string{"--keda-max-polls", "0"}, "--keda-max-polls"},
		{[]string{"--keda-poll-rate", "0"}, "--keda-poll-rate"},
		{[]string{"--keda-poll-rate", "NaN"}, "--keda-poll-rate"},
		{[]string{"--keda-poll-rate", "+Inf"}, "--keda-poll-rate"},
		{[]string{"--keda-poll-burst", "0"}, "--keda-poll-burst"},
		{[]string{"--keda-activity-reuse", "-1s"}, "--keda-activity-reuse"},
		{[]string{"--keda-stream-poll-interval", "0s"}, "--keda-stream-poll-interval"},
		{[]string{"--keda-max-streams-per-namespace", "0"}, "--keda-max-streams-per-namespace"},
		{[]string{"--keda-max-streams-per-namespace", "2000"}, "--keda-max-streams-per-namespace"},
		{[]string{"--keda-namespace-call-rate", "0"}, "--keda-namespace-call-rate"},
		{[]string{"--keda-namespace-call-burst", "0"}, "--keda-namespace-call-burst"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, err := defaultConfig(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
