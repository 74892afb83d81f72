package lag

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFetchRound is one periodic fetch of 1,000 lag targets on one
// cluster, each its own topic of four partitions and its own group, as
// make scale's lag targets are: the collector does this every --lag-tick
// (100 ms, riff's interval) for every cluster with a due target. With
// three brokers the partitions' leaders and the groups' coordinators are
// spread over them, so a round asks each broker for its share.
func BenchmarkFetchRound(b *testing.B) {
	for _, brokers := range []int{1, 3} {
		b.Run(fmt.Sprintf("brokers=%d", brokers), func(b *testing.B) { benchmarkFetchRound(b, brokers) })
	}
}

func benchmarkFetchRound(b *testing.B, brokers int) {
	const targets, partitions = 1000, 4
	c := kfake.MustCluster(kfake.NumBrokers(brokers))
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	topics := make([]string, targets)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic-%04d", i)
	}
	if _, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...); err != nil {
		b.Fatal(err)
	}
	for i, topic := range topics {
		offs := kadm.Offsets{}
		for p := range int32(partitions) {
			offs.AddOffset(topic, p, 0, -1)
		}
		if _, err := adm.CommitOffsets(ctx, fmt.Sprintf("group-%04d", i), offs); err != nil {
			b.Fatal(err)
		}
	}
	rec := newRecorder()
	f, _ := newFetcher(b, rec)
	for i, topic := range topics {
		f.Set(lagTarget(fmt.Sprintf("t-%04d", i), c, topic, fmt.Sprintf("group-%04d", i)))
	}
	f.FetchNow(ctx) // warm: metadata, coordinators
	if s, e := rec.last("ns/t-0999"); s == nil || e != "" {
		b.Fatalf("last target: sample %v, error %q", s, e)
	}
	b.ReportAllocs()
	for b.Loop() {
		f.FetchNow(ctx)
	}
}
