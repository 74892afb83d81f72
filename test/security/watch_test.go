package security

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Bounds on the decider after the watch flood: before the bounds, 5,000
// silent watchers took it from 31 MB to 1,016 MB RSS and 5,113 goroutines.
const (
	watchRSSBound        = 160 << 20
	watchGoroutinesBound = 600
)

// TestWatchStreamFlood is the watcher attack on a decider holding
// 1,000 targets: 5,000 WatchDecisions streams, from three identities over
// ten connections, that never read. The decider holds at most 16 per
// caller (--watch-max-streams-per-caller) and 256 in all, refuses the rest,
// and its memory and goroutines stay bounded.
func TestWatchStreamFlood(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	st, err := deciderv1.NewDeciderServiceClient(f.dial(t, "collector", f.decider)).Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ready := int32(1)
	req := &deciderv1.IngestRequest{CollectorId: "flood"}
	for i := range 1000 {
		ref := &commonv1.TargetRef{Namespace: "flood", Name: fmt.Sprintf("t%04d", i)}
		req.Specs = append(req.Specs, &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA})
		req.Metrics = append(req.Metrics, &deciderv1.TargetMetrics{Target: ref, Samples: []*commonv1.MetricSample{{
			Time: timestamppb.New(now.Add(-time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE,
			AverageConcurrency: float64(100 + i%50), RequestCount: 1, ReadyPods: &ready,
		}}})
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a tick decides every target
	before, err := residentBytes(f.decider)
	if err != nil {
		t.Fatal(err)
	}

	var clients []deciderv1.DeciderServiceClient
	for i := range 10 {
		who := []string{"reader", "operator", "pusher"}[i%3]
		clients = append(clients, deciderv1.NewDeciderServiceClient(f.dial(t, who, f.decider)))
	}
	for i := range 5000 {
		// Opening a server stream costs the client nothing until it reads;
		// a refused one is ended by the server.
		if _, err := clients[i%len(clients)].WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{}); err != nil {
			t.Fatalf("open watch %d: %v", i, err)
		}
	}
	time.Sleep(10 * time.Second)
	after, err := residentBytes(f.decider)
	if err != nil {
		t.Fatal(err)
	}
	g, err := f.decider.Metric("go_goroutines")
	if err != nil {
		t.Fatal(err)
	}
	// Refused by the decider's watch bounds, or before them by the
	// callers' read budgets (--authz-read-rate).
	refused, _ := f.decider.Metric("tidal_decider_watch_refused_total")
	limited, _ := f.decider.Metric("tidal_grpc_refused_total")
	t.Logf("decider with 1,000 targets: RSS %d MiB before, %d MiB after 5,000 silent watchers; %d goroutines; %d watchers refused by the watch bounds, %d by the read budgets",
		before>>20, after>>20, int(g), int(refused), int(limited))
	refused += limited
	if after > watchRSSBound {
		t.Errorf("decider RSS %d MiB, want at most %d MiB", after>>20, watchRSSBound>>20)
	}
	if g > watchGoroutinesBound {
		t.Errorf("decider goroutines %d, want at most %d", int(g), watchGoroutinesBound)
	}
	if refused < 5000-256 {
		t.Errorf("%d watchers refused, want at least %d (256 at most held)", int(refused), 5000-256)
	}
}
