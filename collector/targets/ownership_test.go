package targets

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/shard/bucket"
	"github.com/tidalscale/tidal/shard/route"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestTargetScrapedAgainWhenOwnershipReturns moves a target's bucket away
// from a replica and back, as a failover to a replica that held the bucket
// before does: the target's pods are found again and it is scraped at the
// next interval.
func TestTargetScrapedAgainWhenOwnershipReturns(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	pods := readyPods(t, c, ns, "back", 2)
	for _, p := range pods {
		serveStat(t, p, queuestat.Stat{PodName: p.Name, AverageConcurrentRequests: 1, RequestCount: 2})
	}
	var mine atomic.Bool
	mine.Store(true)
	r := startReplica(t, c, Config{}, func(*Discovery) func(string) bool {
		return func(string) bool { return mine.Load() }
	})
	pa, m := kpaObjects(ns, "back", map[string]string{"app": "back"})
	createKPA(t, tidal, pa, m)
	ref := &commonv1.TargetRef{Namespace: ns, Name: "back-deployment"}
	scraped := func(what string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, what+": the target with 2 ready pods", func() bool {
			w, ok := r.hub.Get(ref)
			return ok && w.ReadyPods == 2
		})
		r.scraper.ScrapeNow(context.Background())
		w, _ := r.hub.Get(ref)
		if len(measured(w)) != 1 || measured(w)[0].GetReadyPods() != 2 || measured(w)[0].GetAverageConcurrency() != 2 {
			t.Fatalf("%s: samples after a scrape %v, failures %v; want one of 2 pods, concurrency 2", what, measured(w), w.Failures)
		}
		if names := r.disc.ReadyPodNames(ref); len(names) != 2 {
			t.Errorf("%s: ReadyPodNames = %v, want 2", what, names)
		}
	}
	scraped("owned")

	mine.Store(false)
	r.disc.Resync()
	testkit.Eventually(t, 30*time.Second, "the target dropped once its bucket moved away", func() bool { return !r.hub.Known(ref) })
	if n := r.scraper.Len(); n != 0 {
		t.Errorf("scraper holds %d targets after the bucket moved away, want 0", n)
	}

	mine.Store(true)
	r.disc.Resync()
	scraped("owned again")
}

// TestTargetReturnsToItsFirstReplicaAfterFailover plays the failover with
// real bucket Leases: replica a takes every bucket, hands the target's to
// b (its preferred owner) once b is up, and takes it back when b stops. A
// pod started while b measured the target is found too, the target is
// scraped again at the next interval, and later pods are followed.
func TestTargetReturnsToItsFirstReplicaAfterFailover(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	const buckets = 4
	ref := &commonv1.TargetRef{Namespace: ns, Name: "web-deployment"}
	// b's identity is picked so that the target's bucket prefers b.
	idA, idB := "a:9001", ""
	bk := "bucket-" + strconv.Itoa(route.Bucket(ref.Key(), buckets))
	for i := 0; idB == ""; i++ {
		if id := fmt.Sprintf("b%d:9001", i); func() bool { o, _ := route.Owner(bk, []string{idA, id}); return o == id }() {
			idB = id
		}
	}
	pods := readyPods(t, c, ns, "web", 1)
	serveStat(t, pods[0], queuestat.Stat{PodName: pods[0].Name, AverageConcurrentRequests: 1, RequestCount: 1})
	pa, m := kpaObjects(ns, "web", map[string]string{"app": "web"})
	createKPA(t, tidal, pa, m)

	start := func(id string) (*replica, context.CancelFunc, chan struct{}) {
		var set *bucket.Set
		r := startReplica(t, c, Config{}, func(d *Discovery) func(string) bool {
			set = bucket.New(bucket.Config{Buckets: buckets, Namespace: ns, Prefix: "collector", LeaseDuration: 3 * time.Second,
				RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, Identity: id}, c.Client, d.Resync, prometheus.NewRegistry(), zap.NewNop())
			return set.Owns
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = set.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return r, cancel, done
	}
	measured := func(r *replica, what string, ready int) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, fmt.Sprintf("%s: the target with %d ready pods", what, ready), func() bool {
			w, ok := r.hub.Get(ref)
			return ok && w.ReadyPods == int32(ready)
		})
		r.scraper.ScrapeNow(context.Background())
		w, _ := r.hub.Get(ref)
		if n := len(measured(w)); n == 0 || measured(w)[n-1].GetReadyPods() != int32(ready) {
			t.Fatalf("%s: samples after a scrape %v, failures %v; want the last of %d pods", what, measured(w), w.Failures, ready)
		}
		if names := r.disc.ReadyPodNames(ref); len(names) != ready {
			t.Errorf("%s: ReadyPodNames = %v, want %d", what, names, ready)
		}
	}

	a, _, _ := start(idA)
	measured(a, "a alone", 1)
	b, stopB, doneB := start(idB)
	testkit.Eventually(t, 30*time.Second, "the target handed to b", func() bool { return b.hub.Known(ref) && !a.hub.Known(ref) })
	measured(b, "b", 1)

	// The Deployment scales up while b measures it.
	more := readyPodsFrom(t, c, ns, "web", 1, 1)
	serveStat(t, more[0], queuestat.Stat{PodName: more[0].Name, AverageConcurrentRequests: 1, RequestCount: 1})
	measured(b, "b after the scale-up", 2)

	stopB()
	<-doneB
	b.stop()
	measured(a, "a again", 2)

	// And a's pod events for the target still reach it.
	last := readyPodsFrom(t, c, ns, "web", 2, 1)
	serveStat(t, last[0], queuestat.Stat{PodName: last[0].Name, AverageConcurrentRequests: 1, RequestCount: 1})
	measured(a, "a after another scale-up", 3)
}
