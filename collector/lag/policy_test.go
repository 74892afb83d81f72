package lag

import (
	"errors"
	"strings"
	"testing"
)

func TestBrokerPolicy(t *testing.T) {
	var pats BrokerPatterns
	if err := pats.Set(" *.kafka.svc.cluster.local:9092 , 10.0.0.*:9092,"); err != nil {
		t.Fatal(err)
	}
	p := BrokerPolicy{Listed: []string{"kafka.ops:9092"}, Patterns: pats}
	for addr, want := range map[string]bool{
		"kafka.ops:9092":                       true, // the operator's
		"kafka.ops:9093":                       false,
		"kafka-0.kafka.svc.cluster.local:9092": true,
		"kafka-0.kafka.svc.cluster.local:9093": false,
		"10.0.0.7:9092":                        true,
		"10.0.1.7:9092":                        false,
		"evil.example.com:9092":                false,
		"kafka.svc.cluster.local:9092":         false,
	} {
		if got := p.Allows(addr); got != want {
			t.Errorf("Allows(%s) = %v, want %v", addr, got, want)
		}
	}
	if (BrokerPolicy{}).Allows("kafka:9092") {
		t.Error("the empty policy allows a broker; want --kafka-brokers alone, none")
	}

	// The operator's seeds need no dial check of the brokers they
	// advertise; any other seed's advertised brokers are checked too.
	c, err := p.Cluster(Cluster{Brokers: []string{"kafka.ops:9092"}})
	if err != nil || c.Allow != nil {
		t.Errorf("the operator's Kafka: Allow set %v, %v; want no dial check", c.Allow != nil, err)
	}
	c, err = p.Cluster(Cluster{Brokers: []string{"kafka.ops:9092", "kafka-1.kafka.svc.cluster.local:9092"}})
	if err != nil || c.Allow == nil || c.Allow("evil.example.com:9092") {
		t.Errorf("a tenant's Kafka: %v; want every dial checked", err)
	}
	// A token endpoint a tenant names is checked even on the operator's Kafka.
	c, err = p.Cluster(Cluster{Brokers: []string{"kafka.ops:9092"}, Auth: Auth{SASL: SASLOAuthBearer, TokenURL: "https://169.254.169.254/token"}})
	if err != nil || c.Allow == nil || c.Allow("169.254.169.254:443") {
		t.Errorf("an OAuth token endpoint on the operator's Kafka: %v; want every dial checked", err)
	}
	_, err = p.Cluster(Cluster{Brokers: []string{"kafka.ops:9092", "169.254.169.254:80"}})
	if !errors.Is(err, ErrBrokerNotAllowed) || !strings.Contains(err.Error(), "169.254.169.254:80") || !strings.Contains(err.Error(), "--allowed-brokers") {
		t.Errorf("a seed outside the policy: %v, want ErrBrokerNotAllowed naming it and the flag", err)
	}
	if err := pats.Set("kafka-[.svc:9092"); err == nil {
		t.Error("a malformed pattern was taken")
	}
}
