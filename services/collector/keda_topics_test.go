package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/proto/externalscaler"
)

// TestKEDAInlineKafkaSeveralTopics: a trigger without a topic, in keda
// mode, reads every topic its group has committed offsets for and sums
// their lag, as KEDA's kafka scaler does: a committed topic's uncommitted
// partitions count as offsetResetPolicy prices them, a topic the group
// never committed on is not read, and the cap is all the read partitions
// times lagThreshold unless allowIdleConsumers; activity is the uncapped
// sum strictly above activationLagThreshold. Its metric is named for the
// group. A group that committed on no topic is UNAVAILABLE (KEDA v2.21.0
// would sum every topic of the cluster: docs/keda.md).
func TestKEDAInlineKafkaSeveralTopics(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// orders: 2 partitions, 30 and 20 records; refunds: 1 partition, 15;
	// audit: 1 partition, 100, which no group commits on.
	for topic, records := range map[string][]int{"orders": {30, 20}, "refunds": {15}, "audit": {100}} {
		if _, err := adm.CreateTopic(ctx, int32(len(records)), 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		for p, n := range records {
			for range n {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("v")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// billing: every partition of orders and refunds at 0 (65 in all);
	// partial: orders' partition 0 at 10 (lag 20), partition 1 never.
	billing, partial := kadm.Offsets{}, kadm.Offsets{}
	billing.AddOffset("orders", 0, 0, -1)
	billing.AddOffset("orders", 1, 0, -1)
	billing.AddOffset("refunds", 0, 0, -1)
	partial.AddOffset("orders", 0, 10, -1)
	for g, offs := range map[string]kadm.Offsets{"billing": billing, "partial": partial} {
		if resp, err := adm.CommitOffsets(ctx, g, offs); err != nil || resp.Error() != nil {
			t.Fatalf("commit %s: %v, %v", g, err, resp.Error())
		}
	}

	dec, _ := startDeciderAndActuator(t)
	col := runCollector(t, "--discovery", "push", "--decider-addr", dec.GRPCAddr, "--allowed-brokers", "127.0.0.1:*")
	conn := dialPlain(t, col)
	waitServing(t, conn)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute) // after the builds
	defer cancel()
	keda := externalscaler.NewExternalScalerClient(conn)
	for i, tc := range []struct {
		name       string
		md         []string
		want       float64
		wantActive bool
	}{
		{"the sum, under the cap", []string{"consumerGroup", "billing", "lagThreshold", "100"}, 65, true},
		{"capped at 3 partitions x 10", []string{"consumerGroup", "billing", "lagThreshold", "10"}, 30, true},
		{"allowIdleConsumers: no cap", []string{"consumerGroup", "billing", "lagThreshold", "10", "allowIdleConsumers", "true"}, 65, true},
		{"an uncommitted partition counts 1 (latest)", []string{"consumerGroup", "partial", "lagThreshold", "100"}, 21, true},
		{"an uncommitted partition counts its log (earliest)", []string{"consumerGroup", "partial", "lagThreshold", "100", "offsetResetPolicy", "earliest"}, 40, true},
		{"capped at orders' 2 partitions x 5", []string{"consumerGroup", "partial", "lagThreshold", "5"}, 10, true},
		{"activity: the uncapped 21 is not above 21", []string{"consumerGroup", "partial", "lagThreshold", "5", "activationLagThreshold", "21"}, 10, false},
		{"activity: 21 is above 20", []string{"consumerGroup", "partial", "lagThreshold", "5", "activationLagThreshold", "20"}, 10, true},
	} {
		md := map[string]string{"bootstrapServers": strings.Join(kf.ListenAddrs(), ",")}
		for j := 0; j+1 < len(tc.md); j += 2 {
			md[tc.md[j]] = tc.md[j+1]
		}
		ref := &externalscaler.ScaledObjectRef{Namespace: "shop", Name: fmt.Sprintf("so-%d", i), ScalerMetadata: md}
		spec, err := keda.GetMetricSpec(ctx, ref)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		name := spec.GetMetricSpecs()[0].GetMetricName()
		if want := "tidal-kafka-group-" + md["consumerGroup"]; name != want {
			t.Errorf("%s: metric %q; want %s", tc.name, name, want)
		}
		resp, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: name})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		act, err := keda.IsActive(ctx, ref)
		if err != nil {
			t.Fatalf("%s: IsActive: %v", tc.name, err)
		}
		if v := resp.GetMetricValues()[0].GetMetricValueFloat(); v != tc.want || act.GetResult() != tc.wantActive {
			t.Errorf("%s: metric %v, active %v; want %v, %v", tc.name, v, act.GetResult(), tc.want, tc.wantActive)
		}
	}

	ref := &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "fresh", ScalerMetadata: map[string]string{
		"bootstrapServers": strings.Join(kf.ListenAddrs(), ","), "consumerGroup": "fresh"}}
	_, err = keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), `"fresh"`) || !strings.Contains(err.Error(), "no topic is named") {
		t.Errorf("a group that committed on no topic: %v; want UNAVAILABLE naming it and asking for a topic", err)
	}
}
