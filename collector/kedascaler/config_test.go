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
		{[]string{"--keda-allowed-brokers", "kafka-[.svc:9092"}, "--keda-allowed-brokers"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, err := defaultConfig(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestAllowedBrokers(t *testing.T) {
	c, err := defaultConfig(t)
	if err != nil {
		t.Fatal(err)
	}
	if !c.allowBroker("anywhere.example.com:9092") {
		t.Error("with no --keda-allowed-brokers a broker is refused")
	}
	c, err = defaultConfig(t, "--keda-allowed-brokers", " *.kafka.svc.cluster.local:9092 , 10.0.0.*:9092,")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"kafka-0.kafka.svc.cluster.local:9092": true,
		"kafka-0.kafka.svc.cluster.local:9093": false,
		"10.0.0.7:9092":                        true,
		"10.0.1.7:9092":                        false,
		"evil.example.com:9092":                false,
		"kafka.svc.cluster.local:9092":         false,
	} {
		if got := c.allowBroker(addr); got != want {
			t.Errorf("allowBroker(%s) = %v, want %v", addr, got, want)
		}
	}
}
