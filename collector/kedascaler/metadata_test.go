package kedascaler

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tidalscale/tidal/collector/lag"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

func TestParseFollow(t *testing.T) {
	tests := []struct {
		name string
		ns   string
		md   map[string]string
		want Follow
	}{
		{"podAutoscaler in the ScaledObject's namespace", "shop", map[string]string{"podAutoscaler": "web"},
			Follow{KindPodAutoscaler, "shop", "web"}},
		{"function in another namespace", "shop", map[string]string{"function": "square", "namespace": "fns"},
			Follow{KindFunction, "fns", "square"}},
		{"KEDA's own keys are ignored", "shop", map[string]string{"podAutoscaler": "web", "scalerAddress": "tidal-collector.tidal.svc:9001", "enableTLS": "true", "unsafeSsl": "false"},
			Follow{KindPodAutoscaler, "shop", "web"}},
		{"a key read from the environment", "shop", map[string]string{"podAutoscalerFromEnv": "web-from-env"},
			Follow{KindPodAutoscaler, "shop", "web-from-env"}},
		{"values are trimmed", "shop", map[string]string{"function": " square "},
			Follow{KindFunction, "shop", "square"}},
		{"a dotted object name", "shop", map[string]string{"podAutoscaler": "web.v2"},
			Follow{KindPodAutoscaler, "shop", "web.v2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.ns, tt.md)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Kafka != nil || got.Follow == nil || *got.Follow != tt.want {
				t.Fatalf("Parse = %+v, want follow %+v", got, tt.want)
			}
		})
	}
}

func TestParseKafka(t *testing.T) {
	base := func(extra ...string) map[string]string {
		md := map[string]string{"bootstrapServers": "kafka-0.kafka:9092, kafka-1.kafka:9092", "consumerGroup": "billing", "scalerAddress": "x:1"}
		for i := 0; i+1 < len(extra); i += 2 {
			md[extra[i]] = extra[i+1]
		}
		return md
	}
	tests := []struct {
		name  string
		md    map[string]string
		check func(t *testing.T, k Kafka)
	}{
		{"KEDA's defaults", base(), func(t *testing.T, k Kafka) {
			if !slices.Equal(k.Brokers, []string{"kafka-0.kafka:9092", "kafka-1.kafka:9092"}) || k.Group != "billing" || k.Topic != "" {
				t.Errorf("brokers %q, group %q, topic %q", k.Brokers, k.Group, k.Topic)
			}
			if k.Config.Mode != lagconfig.ModeKEDA || k.Config.LagThreshold != 10 || k.Config.OffsetResetPolicy != lagconfig.ResetLatest {
				t.Errorf("config %+v, want KEDA's defaults", k.Config)
			}
		}},
		{"every KEDA key", base("topic", "orders", "lagThreshold", "50", "activationLagThreshold", "5", "offsetResetPolicy", "earliest",
			"allowIdleConsumers", "true", "excludePersistentLag", "true", "scaleToZeroOnInvalidOffset", "true",
			"partitionLimitation", "0,2-3", "ensureEvenDistributionOfPartitions", "true"), func(t *testing.T, k Kafka) {
			c := k.Config
			if k.Topic != "orders" || c.Topic != "orders" || c.LagThreshold != 50 || c.ActivationLagThreshold != 5 || c.OffsetResetPolicy != lagconfig.ResetEarliest ||
				!c.AllowIdleConsumers || !c.ExcludePersistentLag || !c.ScaleToZeroOnInvalidOffset || !c.EnsureEvenDistributionOfPartitions ||
				!slices.Equal(c.PartitionLimitation, []int32{0, 2, 3}) {
				t.Errorf("config %+v", c)
			}
		}},
		{"limitToPartitionsWithLag", base("topic", "orders", "limitToPartitionsWithLag", "true"), func(t *testing.T, k Kafka) {
			if !k.Config.LimitToPartitionsWithLag {
				t.Error("limitToPartitionsWithLag not set")
			}
		}},
		{"riff's algorithm on request", base("lag.tidal.dev/mode", "riff-queue", "lag.tidal.dev/maxReplicas", "4"), func(t *testing.T, k Kafka) {
			if k.Config.Mode != lagconfig.ModeRiffQueue || k.Config.MaxReplicas != 4 {
				t.Errorf("config %+v, want riff-queue with maxReplicas 4", k.Config)
			}
		}},
		{"a tidal option beside KEDA's keys", base("lagThreshold", "20", "lag.tidal.dev/tolerance", "0"), func(t *testing.T, k Kafka) {
			if k.Config.LagThreshold != 20 || k.Config.Tolerance != 0 {
				t.Errorf("config %+v", k.Config)
			}
		}},
		{"a key read from the environment", base("lagThresholdFromEnv", "30"), func(t *testing.T, k Kafka) {
			if k.Config.LagThreshold != 30 {
				t.Errorf("lagThreshold %d, want 30", k.Config.LagThreshold)
			}
		}},
		{"a release franz-go does not name, as KEDA takes it", base("version", "2.9.0"), func(t *testing.T, k Kafka) {
			if k.Auth.MaxVersion != "2.9.0" {
				t.Errorf("version %q, want 2.9.0 (capped at 2.8's protocol when dialled)", k.Auth.MaxVersion)
			}
		}},
		{"a release before 1.0", base("version", "0.11.0.2"), func(t *testing.T, k Kafka) {
			if k.Auth.MaxVersion != "0.11.0.2" {
				t.Errorf("version %q, want 0.11.0.2", k.Auth.MaxVersion)
			}
		}},
		{"SASL with its secrets from the environment", base("sasl", "scram_sha512", "usernameFromEnv", "billing", "passwordFromEnv", " pw ", "tls", "enable", "version", "2.8.0"),
			func(t *testing.T, k Kafka) {
				want := lag.Auth{TLS: true, SASL: lag.SASLSCRAM512, User: "billing", Password: " pw ", MaxVersion: "2.8.0"}
				if !reflect.DeepEqual(k.Auth, want) {
					t.Errorf("auth %+v, want %+v (the secret as the environment holds it)", k.Auth, want)
				}
				if _, ok := k.Params["sasl"]; ok || len(k.Params) != 0 {
					t.Errorf("params %v: the auth keys are not lag parameters", k.Params)
				}
			}},
		{"AWS MSK IAM in the brokers' region", base("bootstrapServers", "b-1.shop.kafka.eu-west-1.amazonaws.com:9098", "sasl", "oauthbearer",
			"saslTokenProvider", "aws_msk_iam", "awsRegion", "eu-west-1", "awsAccessKeyIDFromEnv", "AKID", "awsSecretAccessKeyFromEnv", "s"), func(t *testing.T, k Kafka) {
			if k.Auth.TokenProvider != lag.TokenAWSMSKIAM || k.Auth.AWSRegion != "eu-west-1" || k.Auth.AWSKeyID != "AKID" || k.Auth.AWSSecretKey != "s" {
				t.Errorf("auth %+v", k.Auth)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("shop", tt.md)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Follow != nil || got.Kafka == nil {
				t.Fatalf("Parse = %+v, want inline Kafka", got)
			}
			tt.check(t, *got.Kafka)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	long := strings.Repeat("x", 10000)
	kafka := func(extra ...string) map[string]string {
		md := map[string]string{"bootstrapServers": "kafka:9092", "consumerGroup": "billing"}
		for i := 0; i+1 < len(extra); i += 2 {
			md[extra[i]] = extra[i+1]
		}
		return md
	}
	many := map[string]string{"podAutoscaler": "web"}
	for i := range MaxKeys {
		many["lag.tidal.dev/k"+strings.Repeat("x", i)] = "1"
	}
	tests := []struct {
		name string
		ns   string
		md   map[string]string
		// want are the parts of the error: the key it names, at least.
		want []string
	}{
		{"no metadata", "shop", nil, []string{"podAutoscaler", "function", "bootstrapServers"}},
		{"only KEDA's keys", "shop", map[string]string{"scalerAddress": "x:1"}, []string{"podAutoscaler"}},
		{"both modes", "shop", kafka("podAutoscaler", "web"), []string{"scalerMetadata.bootstrapServers", "podAutoscaler"}},
		{"a tidal lag option in follow mode", "shop", map[string]string{"function": "f", "lag.tidal.dev/lagThreshold": "5"}, []string{"lag.tidal.dev/lagThreshold"}},
		{"both kinds", "shop", map[string]string{"podAutoscaler": "web", "function": "web"}, []string{"scalerMetadata.function"}},
		{"namespace alone", "shop", map[string]string{"namespace": "shop"}, []string{"scalerMetadata.podAutoscaler"}},
		{"an unknown key", "shop", map[string]string{"podautoscaler": "web"}, []string{"scalerMetadata", `"podautoscaler"`}},
		{"a long unknown key", "shop", map[string]string{long: "web"}, []string{"scalerMetadata", "xxx…"}},
		{"an invalid name", "shop", map[string]string{"podAutoscaler": "Web_1"}, []string{"scalerMetadata.podAutoscaler", `"Web_1"`}},
		{"an invalid namespace", "shop", map[string]string{"function": "f", "namespace": "a.b"}, []string{"scalerMetadata.namespace", `"a.b"`}},
		{"no namespace at all", "", map[string]string{"function": "f"}, []string{"scalerMetadata.namespace"}},
		{"a value too long", "shop", map[string]string{"function": long}, []string{"scalerMetadata.function", "4096 bytes"}},
		{"a control character", "shop", map[string]string{"function": "a\nb"}, []string{"scalerMetadata.function", "control"}},
		{"a key and its FromEnv", "shop", map[string]string{"function": "a", "functionFromEnv": "b"}, []string{"scalerMetadata.functionFromEnv", "function"}},
		{"too many keys", "shop", many, []string{"scalerMetadata", "64 keys"}},
		{"no bootstrapServers", "shop", map[string]string{"consumerGroup": "g", "lagThreshold": "5"}, []string{"scalerMetadata.bootstrapServers"}},
		{"a broker without a port", "shop", kafka("bootstrapServers", "kafka"), []string{"scalerMetadata.bootstrapServers", `"kafka"`}},
		{"a broker with port 0", "shop", kafka("bootstrapServers", "a:9092,b:0"), []string{"scalerMetadata.bootstrapServers", `"b:0"`}},
		{"no consumerGroup", "shop", map[string]string{"bootstrapServers": "kafka:9092"}, []string{"scalerMetadata.consumerGroup"}},
		{"an invalid topic", "shop", kafka("topic", "a/b"), []string{"scalerMetadata.topic", `"a/b"`}},
		{"lagThreshold 0", "shop", kafka("lagThreshold", "0"), []string{"lagThreshold", `"0"`}},
		{"lagThreshold not a number", "shop", kafka("lagThreshold", "ten"), []string{"lagThreshold", `"ten"`}},
		{"an unknown offsetResetPolicy", "shop", kafka("offsetResetPolicy", "oldest"), []string{"offsetResetPolicy", `"oldest"`}},
		{"allowIdleConsumers not a bool", "shop", kafka("allowIdleConsumers", "yes please"), []string{"allowIdleConsumers", `"yes please"`}},
		{"KEDA's incompatible pair", "shop", kafka("allowIdleConsumers", "true", "limitToPartitionsWithLag", "true"), []string{"limitToPartitionsWithLag"}},
		{"a bad partitionLimitation", "shop", kafka("partitionLimitation", "3-1"), []string{"partitionLimitation", `"3-1"`}},
		{"a KEDA key and its tidal spelling", "shop", kafka("lagThreshold", "5", "lag.tidal.dev/lagThreshold", "6"), []string{"scalerMetadata.lag.tidal.dev/lagThreshold", "lagThreshold"}},
		{"an unknown tidal option", "shop", kafka("lag.tidal.dev/lagThreshhold", "6"), []string{"lagThreshhold"}},
		{"an unknown mode", "shop", kafka("lag.tidal.dev/mode", "fast"), []string{"mode", `"fast"`}},
		{"a long bad value", "shop", kafka("lagThreshold", long), []string{"lagThreshold", "bytes"}},
		{"SASL without its secret", "shop", kafka("sasl", "scram_sha512", "username", "u"), []string{"scalerMetadata.password", "passwordFromEnv"}},
		{"a Kafka password written in the ScaledObject", "shop", kafka("sasl", "plaintext", "username", "u", "password", "hunter2"), []string{"scalerMetadata.password", "not shown", "passwordFromEnv"}},
		{"an unknown SASL mechanism", "shop", kafka("sasl", "hunter2"), []string{"scalerMetadata.sasl", "not shown", "scram_sha512"}},
		{"Kerberos", "shop", kafka("sasl", "gssapi"), []string{"scalerMetadata.sasl", "gssapi"}},
		{"a CA that is no PEM", "shop", kafka("tls", "enable", "caFromEnv", "hunter2"), []string{"scalerMetadata.ca", "PEM"}},
		{"a key without its certificate", "shop", kafka("tls", "enable", "keyFromEnv", "hunter2"), []string{"scalerMetadata.cert", "not shown"}},
		{"a long password", "shop", kafka("sasl", "plaintext", "username", "u", "passwordFromEnv", "hunter2"+long), []string{"scalerMetadata.passwordFromEnv", "not shown", "4096 bytes"}},
		{"a bad version", "shop", kafka("version", "newest"), []string{"scalerMetadata.version", `"newest"`, "2.8.0"}},
		{"a version KEDA refuses: two parts", "shop", kafka("version", "2.8"), []string{"scalerMetadata.version", `"2.8"`, "MAJOR.MINOR.PATCH"}},
		{"a version KEDA refuses: a v", "shop", kafka("version", "v2.8.0"), []string{"scalerMetadata.version", `"v2.8.0"`}},
		{"a version KEDA refuses: three parts before 1.0", "shop", kafka("version", "0.10.2"), []string{"scalerMetadata.version", "0.MINOR.PATCH.N"}},
		{"a version older than franz-go speaks", "shop", kafka("version", "0.7.0.0"), []string{"scalerMetadata.version", "0.8.0"}},
		{"limitToPartitionsWithLag without a topic", "shop", kafka("limitToPartitionsWithLag", "true"), []string{"scalerMetadata.limitToPartitionsWithLag", "topic"}},
		{"ensureEvenDistributionOfPartitions without a topic", "shop", kafka("ensureEvenDistributionOfPartitions", "true"), []string{"scalerMetadata.ensureEvenDistributionOfPartitions", "topic"}},
		{"partitionLimitation without a topic", "shop", kafka("partitionLimitation", "0,1"), []string{"scalerMetadata.partitionLimitation", "topic"}},
		{"AWS MSK IAM for a region not in the brokers' names", "shop", kafka("bootstrapServers", "b-1.shop.kafka.eu-west-1.amazonaws.com:9098",
			"sasl", "oauthbearer", "saslTokenProvider", "aws_msk_iam", "awsRegion", "us-east-1", "awsAccessKeyID", "AKID", "awsSecretAccessKeyFromEnv", "hunter2"),
			[]string{"scalerMetadata.awsRegion", "us-east-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.ns, tt.md)
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("error %q quotes a secret", msg)
			}
			if len(msg) > 600 {
				t.Errorf("error is %d bytes long, want a bounded prefix of the value: %q", len(msg), msg)
			}
			var fe *commonv1.FieldError
			if !errors.As(err, &fe) && !errors.Is(err, lagconfig.ErrInvalidConfig) {
				t.Errorf("error %v is neither a field error nor a lag config error", err)
			}
		})
	}
}

// metricNameRE is what an HPA external metric name may be once KEDA has
// prefixed it: one path segment, and in practice lower-case letters,
// digits and '-'.
var metricNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestMetricName(t *testing.T) {
	long1 := strings.Repeat("a", 250) + "1"
	long2 := strings.Repeat("a", 250) + "2"
	tests := []struct {
		f    Follow
		want string
	}{
		{Follow{KindPodAutoscaler, "shop", "web"}, "tidal-podautoscaler-shop-web"},
		{Follow{KindFunction, "fns", "square.v2"}, "tidal-function-fns-square-v2"},
		{Follow{KindPodAutoscaler, strings.Repeat("n", 63), long1}, ""},
	}
	for _, tt := range tests {
		got := tt.f.MetricName()
		if tt.want != "" && got != tt.want {
			t.Errorf("MetricName(%v) = %q, want %q", tt.f, got, tt.want)
		}
		if len(got) > MaxMetricName || !metricNameRE.MatchString(got) {
			t.Errorf("MetricName(%v) = %q: not a valid metric name of at most %d bytes", tt.f, got, MaxMetricName)
		}
		if got != tt.f.MetricName() {
			t.Errorf("MetricName(%v) is not stable", tt.f)
		}
	}
	a := Follow{KindPodAutoscaler, "shop", long1}.MetricName()
	b := Follow{KindPodAutoscaler, "shop", long2}.MetricName()
	if a == b {
		t.Errorf("two long names differing only at the end share the metric name %q", a)
	}
}
