package lag

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// closing counts the goroutines inside a franz-go client's Close.
func closing() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "franz-go/pkg/kgo.(*Client).Close(") {
			n++
		}
	}
	return n
}

// TestRunWaitsForReleasedClients: the client of a cluster whose last target
// went is closed in the background (its in-flight requests may take a
// while), and Run does not return before that close has finished: nothing
// the fetcher started outlives it. A close is quick, so the round is played
// several times to catch one that outlives Run.
func TestRunWaitsForReleasedClients(t *testing.T) {
	k := kfake.MustCluster(kfake.NumBrokers(1))
	defer k.Close()
	seed(t, k, "orders", "billing", []int64{3}, []int64{1})
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "billing"}
	for round := range 50 {
		f, _ := newFetcher(t, newRecorder())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		f.Set(Target{Ref: ref, Cluster: Cluster{Brokers: k.ListenAddrs()}, Topic: "orders", Group: "billing", Interval: time.Second})
		f.FetchNow(ctx)
		f.Remove(ref)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run = %v", round, err)
		}
		if n := closing(); n != 0 {
			t.Fatalf("round %d: %d franz-go clients still closing after Run returned, want 0", round, n)
		}
	}
}
