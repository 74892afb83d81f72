package lag

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	var mu sync.Mutex
	now := time.Now()
	f.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f.Set(lagTarget("fn", c, "input", "fn"))
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
