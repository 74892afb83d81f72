package kedascaler

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tidalscale/tidal/proto/externalscaler"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
)

// What a tenant writes into a trigger reaches tidal as KEDA's requests:
// these targets feed any bytes through the public entry points (Parse, the
// external scaler's RPCs, the forwarded EnsureKEDATarget), whatever the
// metadata layer beneath them becomes. Seeds are `make test`'s; `make
// fuzz` runs them for a while.

// maxAnswer bounds an error's text: errors quote a bounded prefix of what
// was sent, whatever was sent.
const maxAnswer = 2048

// fuzzMetadata turns a fuzz string into trigger metadata: lines of
// key=value (no '=' makes a key with an empty value).
func fuzzMetadata(s string) map[string]string {
	md := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		k, v, _ := strings.Cut(line, "=")
		md[k] = v
	}
	return md
}

func metadataSeeds() []string {
	return []string{
		"podAutoscaler=web",
		"function=square\nnamespace=shop",
		"podAutoscaler=web\nnamespace=other-tenant",
		"podAutoscaler=Web",
		"function=square\nnamespace=",
		"bootstrapServers=kafka-0.kafka.svc:9092\nconsumerGroup=billing\ntopic=invoices\nlagThreshold=10\nactivationLagThreshold=5",
		"bootstrapServers=169.254.169.254:80,kafka:9092\nconsumerGroup=g\nlagThreshold=0",
		"bootstrapServers=k:9092\nconsumerGroup=g\nlag.tidal.dev/mode=riff-queue\nlag.tidal.dev/partitionLimitation=0-999999999",
		"bootstrapServers=k:9092\nconsumerGroup=g\nsasl=plaintext\npassword=hunter2",
		"bootstrapServers=k:9092\nconsumerGroup=g\nsasl=oauthbearer\noauthTokenEndpointUri=https://169.254.169.254/\nusernameFromEnv=u\npasswordFromEnv=p",
		"scalerAddress=tidal:9001\nenableTLS=true\ncaCert=x\npodAutoscaler=web",
		"podAutoscaler=" + strings.Repeat("a", 5000),
		strings.Repeat("k=v\n", 100),
		"podAutoscaler=web\x00\n\x1b[2J=1",
		"",
	}
}

// FuzzParse: Parse takes any metadata and either refuses it with a short
// error of UTF-8 text, or gives exactly one of a follow and an inline
// trigger, the same twice, whose metric name KEDA accepts.
func FuzzParse(f *testing.F) {
	for _, s := range metadataSeeds() {
		f.Add("shop", s)
	}
	f.Add("", "podAutoscaler=web")
	f.Add(strings.Repeat("n", 300), "function=f")
	f.Fuzz(func(t *testing.T, ns, s string) {
		md := fuzzMetadata(s)
		trig, err := Parse(ns, md)
		again, err2 := Parse(ns, md)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Parse twice: %v, then %v", err, err2)
		}
		if err != nil {
			checkAnswer(t, "Parse", err.Error())
			return
		}
		if (trig.Follow == nil) == (trig.Kafka == nil) {
			t.Fatalf("Parse = %+v: want exactly one of follow and inline Kafka", trig)
		}
		if metricNameOf(trig) != metricNameOf(again) {
			t.Fatalf("metric names %q, then %q", metricNameOf(trig), metricNameOf(again))
		}
		if name := metricNameOf(trig); name == "" || len(name) > MaxMetricName {
			t.Fatalf("metric name %q: want 1 to %d bytes", name, MaxMetricName)
		}
		if f := trig.Follow; f != nil && (f.Name == "" || f.Namespace == "") {
			t.Fatalf("follow trigger %+v without a namespace or a name", f)
		}
	})
}

// FuzzExternalScaler: any bytes as a request of each of KEDA's RPCs, to a
// server whose targets and decisions are known and whose inline Kafka has
// a broker policy. Every answer is a value or a status of the codes the
// server documents, whose message is short UTF-8 text; a ScaledObject
// never learns about another namespace's target.
func FuzzExternalScaler(f *testing.F) {
	for _, s := range metadataSeeds() {
		for _, call := range []uint8{0, 1, 2} {
			b, err := proto.Marshal(&externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "so", ScalerMetadata: fuzzMetadata(s)}, MetricName: "tidal-podautoscaler-shop-web"})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(call, b)
		}
	}
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, call uint8, b []byte) {
		var req externalscaler.GetMetricsRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		s, dec, _ := newTestServer(t)
		dec.set(webRef, 1, 3)
		ref := req.GetScaledObjectRef()
		ctx := context.Background()
		var err error
		switch call % 3 {
		case 0:
			_, err = s.GetMetrics(ctx, &req)
		case 1:
			_, err = s.IsActive(ctx, ref)
		default:
			_, err = s.GetMetricSpec(ctx, ref)
		}
		if err == nil {
			if ref.GetNamespace() != webPA.Namespace && ref.GetNamespace() != "" {
				if trig, perr := Parse(ref.GetNamespace(), ref.GetScalerMetadata()); perr == nil && trig.Follow != nil && trig.Follow.Namespace != ref.GetNamespace() {
					t.Fatalf("a ScaledObject of %q answered about %s", ref.GetNamespace(), trig.Follow)
				}
			}
			return
		}
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("an answer that is no status: %v", err)
		}
		switch st.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unavailable, codes.FailedPrecondition,
			codes.ResourceExhausted, codes.Unimplemented:
		default:
			t.Fatalf("code %s: %v", st.Code(), err)
		}
		checkAnswer(t, "the external scaler", st.Message())
	})
}

// FuzzEnsureKEDATarget: any bytes as a forwarded inline trigger, to the
// replica that would measure it. It is refused as KEDA's own call would
// be, with a short message, or measured; a broker outside the policy is
// never made a target.
func FuzzEnsureKEDATarget(f *testing.F) {
	for _, s := range metadataSeeds() {
		b, err := proto.Marshal(&collectorv1.EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: fuzzMetadata(s)})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req collectorv1.EnsureKEDATargetRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		cfg := testConfig()
		cfg.Brokers.Patterns = []string{"*.kafka.svc:9092", "k:9092"}
		fx := newInlineFixture(t, cfg, nil, nil)
		fx.reader.set([2]int64{10, 0})
		_, err := NewTargetService(&Inline{Triggers: fx.tr}).EnsureKEDATarget(context.Background(), &req)
		fx.reader.mu.Lock()
		for key, target := range fx.reader.targets {
			for _, br := range target.Cluster.Brokers {
				if !cfg.Brokers.Allows(br) {
					t.Fatalf("target %s made for broker %q, outside the policy", key, br)
				}
			}
		}
		fx.reader.mu.Unlock()
		if err == nil {
			return
		}
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("an answer that is no status: %v", err)
		}
		checkAnswer(t, "EnsureKEDATarget", st.Message())
	})
}

func checkAnswer(t *testing.T, what, msg string) {
	t.Helper()
	if len(msg) > maxAnswer {
		t.Fatalf("%s: a %d-byte answer; want a bounded prefix of what was sent: %.200q", what, len(msg), msg)
	}
	if !utf8.ValidString(msg) {
		t.Fatalf("%s: an answer of invalid UTF-8: %q", what, msg)
	}
}
