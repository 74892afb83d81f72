package lag

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidalscale/tidal/test/testkit"
)

// TestEndsBetweenListings follows one topic through the rounds between
// full listings, where only the end offsets of the partitions the last
// listing found are asked for: new records show at once, a deleted topic
// is an error as a full listing reports it, and a partition added shows
// once the listing is partitionsMaxAge old.
func TestEndsBetweenListings(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	seed(t, c, "input", "fn", []int64{3, 1}, []int64{0, 0})
	f, rec, advance := clockedFetcher(t, c)
	ends := func() []int64 {
		t.Helper()
		f.FetchNow(context.Background())
		s, errMsg := rec.last("ns/fn")
		if s == nil {
			t.Fatalf("no sample: %s", errMsg)
		}
		var out []int64
		for _, p := range s.GetPartitionLags() {
			out = append(out, p.GetEndOffset())
		}
		return out
	}
	if got := ends(); len(got) != 2 || got[0] != 3 || got[1] != 1 {
		t.Fatalf("first round (a full listing): ends %v, want [3 1]", got)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "input", Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	if got := ends(); len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("a round from the listing's partitions: ends %v, want [3 2]", got)
	}

	adm := kadm.NewClient(cl)
	if _, err := adm.CreatePartitions(ctx, 1, "input"); err != nil {
		t.Fatal(err)
	}
	// Within partitionsMaxAge of a listing the rounds ask for the two
	// partitions it found; then a listing finds the third (once kgo's
	// cached metadata, as old at most, has it too).
	if got := ends(); len(got) != 2 {
		t.Errorf("a round within partitionsMaxAge of the listing: %d partitions, want the listing's 2", len(got))
	}
	testkit.Eventually(t, 30*time.Second, "the added partition listed", func() bool {
		advance(partitionsMaxAge)
		return len(ends()) == 3
	})

	if _, err := adm.DeleteTopics(ctx, "input"); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	f.FetchNow(ctx)
	if _, errMsg := rec.last("ns/fn"); !strings.Contains(errMsg, `topic "input"`) {
		t.Errorf("a round after the topic was deleted: error %q; want one naming the topic", errMsg)
	}
}

// TestRoundAcrossBrokers: with a topic's partitions led by three brokers,
// the answers of a full listing and of a round between listings (each split
// over the brokers, filled into one array) give every partition its own end
// and committed offset, in partition order.
func TestRoundAcrossBrokers(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(3))
	defer c.Close()
	records := []int64{5, 0, 2, 7, 1, 3}
	commits := []int64{1, -1, 2, 0, -1, 3}
	seed(t, c, "input", "fn", records, commits)
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	f.Set(lagTarget("fn", c, "input", "fn"))
	for _, round := range []string{"a full listing", "a round between listings"} {
		f.FetchNow(context.Background())
		s, errMsg := rec.last("ns/fn")
		if s == nil {
			t.Fatalf("%s: no sample: %s", round, errMsg)
		}
		pls := s.GetPartitionLags()
		if len(pls) != len(records) || s.GetPartitionCount() != int32(len(records)) {
			t.Fatalf("%s: %d partitions (count %d), want %d", round, len(pls), s.GetPartitionCount(), len(records))
		}
		for i, pl := range pls {
			wantCommit := commits[i] >= 0
			if pl.GetPartition() != int32(i) || pl.GetEndOffset() != records[i] || (pl.CommittedOffset != nil) != wantCommit ||
				(wantCommit && pl.GetCommittedOffset() != commits[i]) {
				t.Errorf("%s: partition lag %d = %v; want partition %d, end %d, committed %d (-1: none)", round, i, pl, i, records[i], commits[i])
			}
		}
	}
}

// TestListingOfOneTopicKeepsTheOthers: a listing of one topic (a KEDA
// poll's) leaves the partitions the last listing found for the others, so
// the next round asks for their end offsets alone; each topic's listing
// ages on its own.
func TestListingOfOneTopicKeepsTheOthers(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	for _, topic := range []string{"a", "b", "c"} {
		seed(t, c, topic, topic, []int64{1, 2}, nil)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l := &endLister{cl: cl, adm: kadm.NewClient(cl)}
	ctx := context.Background()
	t0 := time.Now()
	if _, err := l.list(ctx, []string{"a", "b"}, t0, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.quick(ctx, []string{"c"}, t0.Add(time.Second), &leaderAsks{}); ok {
		t.Fatal("a topic never listed was answered without a listing")
	}
	if _, err := l.list(ctx, []string{"c"}, t0.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	ends, ok := l.quick(ctx, []string{"a", "b"}, t0.Add(2*time.Second), &leaderAsks{})
	if !ok {
		t.Fatal("after a listing of c alone, a and b needed a full listing again")
	}
	if e := ends["b"].parts; len(e) != 2 || e[0].offset != 1 || e[1].offset != 2 {
		t.Errorf("b's ends between listings: %+v, want partitions 0 and 1 at 1 and 2", e)
	}
	if _, ok := l.quick(ctx, []string{"a", "c"}, t0.Add(partitionsMaxAge), &leaderAsks{}); ok {
		t.Error("a's listing, partitionsMaxAge old, was still used")
	}
	if _, ok := l.quick(ctx, []string{"c"}, t0.Add(partitionsMaxAge), &leaderAsks{}); !ok {
		t.Error("c's listing, younger than partitionsMaxAge, was not used")
	}
}

// TestRoundAfterALeaderMoves: a round between listings asks each
// partition's leader as the last listing found it. When a leader has moved
// since (the old one answers NOT_LEADER_OR_FOLLOWER) or a broker answers a
// partition's error, the round is a full listing instead and reports what
// it reports; the rounds after ask the new leader.
func TestRoundAfterALeaderMoves(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(3))
	defer c.Close()
	seed(t, c, "input", "fn", []int64{5, 0, 2}, []int64{1, -1, 2})
	f, rec, advance := clockedFetcher(t, c)
	listOffsets, metadata := countRequests(c, kmsg.ListOffsets), countRequests(c, kmsg.Metadata)
	round := func(name string, want []int64) {
		t.Helper()
		advance(100 * time.Millisecond)
		f.FetchNow(context.Background())
		s, errMsg := rec.last("ns/fn")
		if errMsg != "" || s == nil {
			t.Fatalf("%s: sample %v, error %q; want a sample", name, s, errMsg)
		}
		var got []int64
		for _, p := range s.GetPartitionLags() {
			got = append(got, p.GetEndOffset())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: ends %v, want %v", name, got, want)
		}
	}
	round("a full listing", []int64{5, 0, 2})
	listOffsets.Store(0)
	metadata.Store(0)
	round("a round between listings", []int64{5, 0, 2})
	leaders := map[int32]bool{}
	for p := range int32(3) {
		leaders[c.LeaderFor("input", p)] = true
	}
	if got, want := listOffsets.Load(), int32(len(leaders)); got != want || metadata.Load() != 0 {
		t.Errorf("a round between listings: %d ListOffsets and %d Metadata requests; want one ListOffsets per leader (%d) and no Metadata", got, metadata.Load(), want)
	}

	from := c.LeaderFor("input", 0)
	if err := c.MoveTopicPartition("input", 0, (from+1)%3); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 3 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "input", Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	round("the round after partition 0's leader moved", []int64{8, 0, 2})
	listOffsets.Store(0)
	metadata.Store(0)
	round("the round after that", []int64{8, 0, 2})
	if got := listOffsets.Load(); got < 1 || got > 3 || metadata.Load() != 0 {
		t.Errorf("the round after the listing that found the new leader: %d ListOffsets and %d Metadata requests; want one ListOffsets per leader and no Metadata", got, metadata.Load())
	}

	// One broker's answer is a partition's error, as it would be from a
	// broker losing its leadership; kadm's listing, asked next, is clean.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: "input", Err: kerr.NotLeaderForPartition})
	round("a round whose direct answer was an error", []int64{8, 0, 2})
}
