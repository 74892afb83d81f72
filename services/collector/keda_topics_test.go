package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidalscale/tidal/proto/externalscaler"
)

// TestKEDAInlineKafkaSeveralTopics: a trigger without a topic, in keda
// mode, on a group that commits on two topics reads both and sums their
// lag, capped at all their partitions, as KEDA's kafka scaler does; its
// metric is named for the group.
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
	// orders: 2 partitions, 30 and 20 records; refunds: 1 partition, 15.
	commits := kadm.Offsets{}
	for topic, records := range map[string][]int{"orders": {30, 20}, "refunds": {15}} {
		if _, err := adm.CreateTopic(ctx, int32(len(records)), 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		for p, n := range records {
			for range n {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("v")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			commits.AddOffset(topic, int32(p), 0, -1)
		}
	}
	if _, err := adm.CommitOffsets(ctx, "billing", commits); err != nil {
		t.Fatal(err)
	}

	dec, _ := startDeciderAndActuator(t)
	col := runCollector(t, "--discovery", "push", "--decider-addr", dec.GRPCAddr, "--allowed-brokers", "127.0.0.1:*")
	conn := dialPlain(t, col)
	waitServing(t, conn)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute) // after the builds
	defer cancel()
	keda := externalscaler.NewExternalScalerClient(conn)
	for _, tc := range []struct {
		threshold string
		want      float64
	}{{"100", 65}, {"10", 30}} { // 65 in all; capped at 3 partitions x 10
		ref := &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "billing-" + tc.threshold, ScalerMetadata: map[string]string{
			"bootstrapServers": strings.Join(kf.ListenAddrs(), ","), "consumerGroup": "billing", "lagThreshold": tc.threshold,
		}}
		spec, err := keda.GetMetricSpec(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		name := spec.GetMetricSpecs()[0].GetMetricName()
		if name != "tidal-kafka-group-billing" {
			t.Errorf("metric %q; want tidal-kafka-group-billing", name)
		}
		resp, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: name})
		if err != nil {
			t.Fatalf("lagThreshold %s: %v", tc.threshold, err)
		}
		if v := resp.GetMetricValues()[0].GetMetricValueFloat(); v != tc.want {
			t.Errorf("lagThreshold %s: metric %v; want %v", tc.threshold, v, tc.want)
		}
	}
}
