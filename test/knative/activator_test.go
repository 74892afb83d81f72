package knative

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/knative/knactivator"
	"github.com/tidalscale/tidal/test/testkit"
)

func has(pred func(sample) bool) func([]sample) bool {
	return func(ss []sample) bool {
		for _, s := range ss {
			if pred(s) {
				return true
			}
		}
		return false
	}
}

// TestActivatorStatsReachTheStream: Knative's activator code connects to
// the collector binary, and what it reports reaches the collector's stream
// to its decider under the revision's Deployment, stamped with whole
// seconds: stats as the reporter's tick hands them over, the immediate
// concurrency-1 stat of a revision's first request, and the per-second
// reports while requests are in flight.
func TestActivatorStatsReachTheStream(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := knactivator.Start(t, col.wsURL, "activator-test")
	a.WaitReady(t, 10*time.Second)

	a.Send(knactivator.Stat("shop", "cart-00001", "activator-test", 2.5, 7), knactivator.Stat("shop", "pay-00001", "activator-test", 0.5, 1))
	for _, tt := range []struct {
		key               string
		concurrency, reqs float64
	}{{"shop/cart-00001-deployment", 2.5, 7}, {"shop/pay-00001-deployment", 0.5, 1}} {
		got := dec.wait(t, tt.key, 10*time.Second, has(func(s sample) bool { return s.concurrency == tt.concurrency && s.requests == tt.reqs }))
		for _, s := range got {
			if s.time.Nanosecond() != 0 {
				t.Errorf("%s: sample time %v, want the arrival second", tt.key, s.time)
			}
		}
	}

	// Three requests held in flight for first-00001.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { a.Request(ctx, "shop", "first-00001") })
	}
	const first = "shop/first-00001-deployment"
	dec.wait(t, first, 5*time.Second, has(func(s sample) bool { return s.concurrency == 1 && s.requests == 1 }))
	// A whole report period with the three in flight and no new request.
	dec.wait(t, first, 10*time.Second, has(func(s sample) bool { return s.concurrency > 2.99 && s.concurrency <= 3 && s.requests == 0 }))
	cancel()
	wg.Wait()
	if got := col.metric(t, statsTotal("recorded")); got < 4 {
		t.Errorf("recorded stats = %v, want at least 4", got)
	}
	if got := col.metric(t, "tidal_collector_activator_connections"); got != 1 {
		t.Errorf("connections = %v, want 1", got)
	}
}

// TestPingsKeepTheActivatorReady: Knative's connection pings every 3.3 s
// and drops the connection when no pong came for 10 s
// (knative.dev/pkg/websocket pongTimeout); 12 s connected without a drop
// means the collector answers them.
func TestPingsKeepTheActivatorReady(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := knactivator.Start(t, col.wsURL, "activator-ping")
	a.WaitReady(t, 10*time.Second)
	end := time.Now().Add(12 * time.Second)
	for time.Now().Before(end) {
		if err := a.Conn.Status(); err != nil {
			t.Fatalf("Knative's activator lost its connection: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := a.Drops.Load(); n != 0 {
		t.Errorf("connection dropped %d times in 12 s, want 0: pongs are not answered", n)
	}
}

// TestActivatorRedialsAfterARestart: a collector stopping closes the
// connection with 1012 (service restart), Knative's connection redials,
// and the restarted collector takes its stats.
func TestActivatorRedialsAfterARestart(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec)
	a := knactivator.Start(t, col.wsURL, "activator-restart")
	a.WaitReady(t, 10*time.Second)
	if err := col.proc.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "Knative's activator to see the collector go", func() bool { return a.Drops.Load() != 0 })
	if err := col.proc.Start(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Knative's backoff starts at 100 ms and grows by 1.3 over 20 steps.
	a.WaitReady(t, 30*time.Second)
	if n := a.Connects.Load(); n < 2 {
		t.Errorf("connects = %d, want at least 2", n)
	}
	a.Send(knactivator.Stat("shop", "again-00001", "activator-restart", 1, 1))
	dec.wait(t, "shop/again-00001-deployment", 10*time.Second, has(func(s sample) bool { return s.concurrency == 1 }))
}
