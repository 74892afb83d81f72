package security

import (
	"context"
	"fmt"
	"testing"
	"time"

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
// ten connections, that never read. The authorization interceptor lets
// through at most 4 per caller and namespace
// (--authz-namespace-watches-per-caller; these watch every namespace) and
// 32 per namespace, the decider holds at most 16 per caller
// (--watch-max-streams-per-caller) and 256 in all; the rest are refused,
// and the decider's memory and goroutines stay bounded.
func TestWatchStreamFlood(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var refs []*commonv1.TargetRef
	for i := range 1000 {
		refs = append(refs, &commonv1.TargetRef{Namespace: "flood", Name: fmt.Sprintf("t%04d", i)})
	}
	f.ingest(ctx, t, refs)
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
	// authorization interceptor's budgets (--authz-read-rate,
	// --authz-namespace-read-rate, --authz-namespace-watches*).
	refused, _ := f.decider.Metric("tidal_decider_watch_refused_total")
	limited, _ := f.decider.Metric("tidal_grpc_refused_total")
	t.Logf("decider with 1,000 targets: RSS %d MiB before, %d MiB after 5,000 silent watchers; %d goroutines; %d watchers refused by the decider's watch bounds, %d by the interceptor's budgets",
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
