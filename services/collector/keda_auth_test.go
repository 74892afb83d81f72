package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/proto/externalscaler"
	"github.com/tidalscale/tidal/test/kedavector"
)

// TestKEDAInlineKafkaAuth measures inline triggers on brokers that require
// TLS and SASL, for each mechanism kfake offers (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512), with the values KEDA forwards from the workload's
// environment (caFromEnv, usernameFromEnv, passwordFromEnv): the lag is
// read; the same trigger with a wrong password (a rotated Secret) is
// UNAVAILABLE, and right again once the password is; no answer and no log
// line of the collector, at debug level, quotes a password.
func TestKEDAInlineKafkaAuth(t *testing.T) {
	server, client, caPEM, err := kedavector.LoopbackTLS()
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := startDeciderAndActuator(t)
	// The collector as a process, its whole log (debug level) read at
	// the end.
	col := startService(t, buildServices(t, "collector"), t.TempDir(), "collector",
		"--discovery", "push", "--decider-addr", dec.GRPCAddr, "--log-level", "debug", "--allowed-brokers", "127.0.0.1:*")
	conn := dialPlain(t, col.GRPCAddr)
	waitServing(t, conn)
	keda := externalscaler.NewExternalScalerClient(conn)

	var passwords []string
	for _, m := range []struct {
		kfake, keda string
		mech        func(user, pass string) sasl.Mechanism
	}{
		{"PLAIN", "plaintext", func(u, p string) sasl.Mechanism { return plain.Auth{User: u, Pass: p}.AsMechanism() }},
		{"SCRAM-SHA-256", "scram_sha256", func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha256Mechanism() }},
		{"SCRAM-SHA-512", "scram_sha512", func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha512Mechanism() }},
	} {
		t.Run(m.kfake, func(t *testing.T) {
			password, wrong := "pw-"+m.kfake+"-right", "pw-"+m.kfake+"-wrong"
			passwords = append(passwords, password, wrong)
			kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(m.kfake, "billing", password),
				kfake.TLS(server))
			if err != nil {
				t.Fatal(err)
			}
			defer kf.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Seven records on two partitions, the group committed at 0.
			cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.SASL(m.mech("billing", password)),
				kgo.DialTLSConfig(client), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			if _, err := adm.CreateTopic(ctx, 2, 1, nil, "invoices"); err != nil {
				t.Fatal(err)
			}
			var recs []*kgo.Record
			for i := range 7 {
				recs = append(recs, &kgo.Record{Topic: "invoices", Partition: int32(i % 2), Value: []byte("v")})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			commits := kadm.Offsets{}
			commits.AddOffset("invoices", 0, 0, -1)
			commits.AddOffset("invoices", 1, 0, -1)
			if _, err := adm.CommitOffsets(ctx, "billing", commits); err != nil {
				t.Fatal(err)
			}

			md := map[string]string{
				"bootstrapServers": strings.Join(kf.ListenAddrs(), ","), "consumerGroup": "billing", "topic": "invoices",
				"lagThreshold": "5", "tls": "enable", "caFromEnv": string(caPEM), "sasl": m.keda,
				"usernameFromEnv": "billing", "passwordFromEnv": password,
			}
			ref := &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "billing-" + strings.ToLower(m.kfake), ScalerMetadata: md}
			read := func() (float64, error) {
				resp, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "tidal-kafka-invoices"})
				if err != nil {
					return 0, err
				}
				return resp.GetMetricValues()[0].GetMetricValueFloat(), nil
			}
			if v, err := read(); err != nil || v != 7 {
				t.Fatalf("with the password: %v, %v; want the lag, 7", v, err)
			}
			md["passwordFromEnv"] = wrong
			_, err = read()
			if status.Code(err) != codes.Unavailable {
				t.Errorf("with a wrong password: %v; want UNAVAILABLE", err)
			}
			if err != nil && (strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), password)) {
				t.Errorf("the answer quotes a password: %v", err)
			}
			md["passwordFromEnv"] = password
			if v, err := read(); err != nil || v != 7 {
				t.Errorf("with the password again: %v, %v; want 7", v, err)
			}
		})
	}
	out := col.LogTail(1 << 20)
	if !strings.Contains(out, "KEDA inline Kafka target created") {
		t.Fatalf("the collector's debug log has no line of the inline targets; it is not the log under test:\n%s", out)
	}
	for _, p := range passwords {
		if strings.Contains(out, p) {
			t.Errorf("the collector's log quotes a password (%s)", p)
		}
	}
}
