package chart_test

import (
	"strings"
	"testing"
)

// TestSchemaRefuses proves values.schema.json stops bad values at install
// time, before anything reaches the cluster, with a message naming the value.
func TestSchemaRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  []string
		// want are substrings the error must carry.
		want []string
	}{
		{"negative collector replicas", []string{"collector.replicas=-1"}, []string{"/collector/replicas", "minimum: got -1, want 0"}},
		{"negative decider replicas", []string{"decider.replicas=-3"}, []string{"/decider/replicas", "minimum: got -3, want 0"}},
		{"negative actuator replicas", []string{"actuator.replicas=-1"}, []string{"/actuator/replicas", "minimum"}},
		{"replicas as text", []string{"collector.replicas=two"}, []string{"/collector/replicas", "want integer"}},
		{"port out of range", []string{"decider.ports.grpc=70000"}, []string{"/decider/ports/grpc", "maximum"}},
		{"unknown log level", []string{"logLevel=verbose"}, []string{"/logLevel", "verbose"}},
		{"unknown pull policy", []string{"image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy"}},
		{"misspelt top-level key", []string{"colector.replicas=2"}, []string{"colector"}},
		{"misspelt component key", []string{"decider.replica=2"}, []string{"/decider", "replica"}},
		{"cert-manager without an issuer", []string{"tls.mode=cert-manager"}, []string{"/tls/certManager/issuerRef", "name"}},
		{"unknown tls mode", []string{"tls.mode=optional"}, []string{"/tls/mode"}},
		{"trust domain with a port", []string{"tls.trustDomain=cluster.local:443"}, []string{"/tls/trustDomain"}},
		{"pusher not a SPIFFE ID", []string{"authz.pushers[0]=activator"}, []string{"/authz/pushers/0"}},
		{"allow rule without identities", []string{"authz.allow[0].method=/tidal.decider.v1.DeciderService/"}, []string{"/authz/allow/0", "identities"}},
		{"no concurrent streams", []string{"authz.maxConcurrentStreams=0"}, []string{"/authz/maxConcurrentStreams", "minimum"}},
		{"negative namespace watches", []string{"authz.namespaceWatches=-1"}, []string{"/authz/namespaceWatches", "minimum"}},
		{"tick interval not in seconds", []string{"decider.tickInterval=1500ms"}, []string{"/decider/tickInterval"}},
		{"history not a duration", []string{"collector.history=two minutes"}, []string{"/collector/history"}},
		{"secret name not a DNS name", []string{"actuator.secretNames[0]=Not_A_Name"}, []string{"/actuator/secretNames/0"}},
		{"negative buckets", []string{"collector.buckets=-1"}, []string{"/collector/buckets", "minimum"}},
		{"status interval over a minute", []string{"actuator.statusInterval=90s"}, []string{"/actuator/statusInterval"}},
		{"status interval not in seconds", []string{"actuator.statusInterval=500ms"}, []string{"/actuator/statusInterval"}},
		{"live reads at rate 0", []string{"actuator.liveReads.rate=0"}, []string{"/actuator/liveReads/rate"}},
		{"live reads per namespace without a burst", []string{"actuator.liveReads.namespaceBurst=0"}, []string{"/actuator/liveReads/namespaceBurst", "minimum"}},
		{"unknown decider discovery", []string{"collector.deciderDiscovery=consul"}, []string{"/collector/deciderDiscovery"}},
		{"broker without a port", []string{"kafka.brokers[0]=kafka"}, []string{"/kafka/brokers/0"}},
		{"broker pattern without a port", []string{"collector.allowedBrokers[0]=*.kafka"}, []string{"/collector/allowedBrokers/0"}},
		{"broker patterns in one string", []string{`collector.allowedBrokers[0]=a:9092\,b:9092`}, []string{"/collector/allowedBrokers/0"}},
		{"watched namespace not a name", []string{"watchNamespaces[0]=Team_A"}, []string{"/watchNamespaces/0"}},
		{"binding without namespaces", []string{"authz.namespaces[0].identity=spiffe://cluster.local/ns/a/sa/b"}, []string{"/authz/namespaces/0", "namespaces"}},
		{"running as root", []string{"podSecurityContext.runAsNonRoot=false"}, []string{"/podSecurityContext/runAsNonRoot"}},
		{"root user id", []string{"podSecurityContext.runAsUser=0"}, []string{"/podSecurityContext/runAsUser", "minimum"}},
		{"writable root filesystem", []string{"securityContext.readOnlyRootFilesystem=false"}, []string{"/securityContext/readOnlyRootFilesystem"}},
		{"privilege escalation", []string{"securityContext.allowPrivilegeEscalation=true"}, []string{"/securityContext/allowPrivilegeEscalation"}},
		{"config value not a scalar", []string{"config.autoscaler.stable-window.x=1"}, []string{"/config/autoscaler/stable-window"}},
		{"Knative namespace not a DNS label", []string{"knative.namespace=Knative_Serving"}, []string{"/knative/namespace"}},
		{"cluster domain with a path", []string{"knative.clusterDomain=cluster.local/x"}, []string{"/knative/clusterDomain"}},
		// Knative's webhook refuses any other class ending in .knative.dev
		// on a Revision (validateClass, v0.50.0).
		{"a class Knative's webhook refuses", []string{"knative.classes[0]=tidal.autoscaling.knative.dev"}, []string{"/knative/classes/0"}},
		{"Knative's HPA class", []string{"knative.classes[0]=hpa.autoscaling.knative.dev"}, []string{"/knative/classes/0"}},
		{"autoscaler Service switch not a boolean", []string{"knative.autoscalerService.create=maybe"}, []string{"/knative/autoscalerService/create"}},
		{"activator port 0", []string{"knative.activator.port=0"}, []string{"/knative/activator/port", "minimum"}},
		{"activator port out of range", []string{"knative.activator.port=70000"}, []string{"/knative/activator/port", "maximum"}},
		{"activator network without a prefix length", []string{"knative.activator.allowedCIDRs[0]=10.0.0.0"}, []string{"/knative/activator/allowedCIDRs/0"}},
		{"activator networks in one string", []string{`knative.activator.allowedCIDRs[0]=10.0.0.0/8\,fd00::/8`}, []string{"/knative/activator/allowedCIDRs/0"}},
		{"no activator connections", []string{"knative.activator.maxConnections=0"}, []string{"/knative/activator/maxConnections", "minimum"}},
		{"activator frame bound too small", []string{"knative.activator.maxFrameBytes=32"}, []string{"/knative/activator/maxFrameBytes", "minimum"}},
		{"activator frame bound above 64 MiB", []string{"knative.activator.maxFrameBytes=67108865"}, []string{"/knative/activator/maxFrameBytes", "maximum"}},
		{"more revisions per message than PushStats takes", []string{"knative.activator.maxMessages=10001"}, []string{"/knative/activator/maxMessages", "maximum"}},
		{"no activator stat rate", []string{"knative.activator.statRate=0"}, []string{"/knative/activator/statRate"}},
		{"activator idle timeout not a duration", []string{"knative.activator.idleTimeout=soon"}, []string{"/knative/activator/idleTimeout"}},
		{"backlog wait at the activator's pong timeout", []string{"knative.activator.backlogWait=10s"}, []string{"/knative/activator/backlogWait"}},
		{"backlog wait in minutes", []string{"knative.activator.backlogWait=1m"}, []string{"/knative/activator/backlogWait"}},
		{"no forward queue", []string{"knative.activator.forwardQueue=0"}, []string{"/knative/activator/forwardQueue", "minimum"}},
		{"misspelt activator key", []string{"knative.activator.prot=8080"}, []string{"/knative/activator", "prot"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := release{name: "bad", namespace: "default", set: tt.set}
			out, err := helm(t, r.args("template")...)
			if err == nil {
				t.Fatalf("helm template --set %v succeeded; want a schema error. Output:\n%.400s", tt.set, out)
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Errorf("error is not the schema's:\n%s", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

// TestTemplateRefuses covers what the schema cannot express: the templates
// fail with a message naming the values.
func TestTemplateRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  []string
		want []string
	}{
		{"no buckets with two collectors", []string{"collector.buckets=0"}, []string{"collector.buckets is 0", "collector.replicas"}},
		{"a broker namespace twice", []string{
			"collector.brokerSecrets[0].namespace=a", "collector.brokerSecrets[0].names[0]=x",
			"collector.brokerSecrets[1].namespace=a", "collector.brokerSecrets[1].names[0]=y",
		}, []string{`namespace "a" is listed twice`}},
		{"service account without a name", []string{"decider.serviceAccount.create=false"}, []string{"decider.serviceAccount.name is required"}},
		{"activator port on the collector's gRPC port", []string{"knative.enabled=true", "knative.activator.port=9001"}, []string{"knative.activator.port 9001", "collector.ports"}},
		{"activator stat burst below one full message", []string{"knative.enabled=true", "knative.activator.statBurst=100"}, []string{"knative.activator.statBurst 100", "knative.activator.maxMessages 10000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := release{name: "bad", namespace: "default", set: tt.set}
			out, err := helm(t, r.args("template")...)
			if err == nil {
				t.Fatalf("helm template --set %v succeeded; want an error. Output:\n%.400s", tt.set, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%s", w, err)
				}
			}
		})
	}
}
