package targets

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/tools/cache"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/test/cluster"
)

// TestRunReturnsOnceItsInformersStopped: the informers Start starts belong
// to the Discovery, and Run, once its context ends, returns only after they
// have stopped. The round is played several times: an informer stops
// quickly, and one that outlives Run must be caught.
func TestRunReturnsOnceItsInformersStopped(t *testing.T) {
	c := cluster.Shared(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		reg := prometheus.NewRegistry()
		log := zap.NewNop()
		hub := dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 16}, dispatch.NewMetrics(reg), log)
		d := New(Config{}, c.Client, tidal, hub, scrape.New(scrape.Config{}, hub, scrape.NewMetrics(reg), log),
			lag.New(lag.Config{Tick: time.Hour, Timeout: time.Second}, hub, lag.NewMetrics(reg), log), log)
		ctx, cancel := context.WithCancel(context.Background())
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run = %v", round, err)
		}
		for name, inf := range map[string]cache.SharedIndexInformer{"pod": d.podInformer, "Metric": d.crd.Metrics,
			"PodAutoscaler": d.crd.PodAutoscalers, "Function": d.crd.Functions} {
			if !inf.IsStopped() {
				t.Errorf("round %d: the %s informer still runs after Run returned", round, name)
			}
		}
	}
}
