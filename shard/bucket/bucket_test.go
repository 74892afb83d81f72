package bucket

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type replica struct {
	dead    atomic.Bool
	set     *Set
	changes atomic.Int32
	cancel  context.CancelFunc
	done    chan struct{}
}

// startReplica runs a Set; with dieable, its API client can be cut off so
// that stopping it plays a replica that dies: it cannot release its Leases.
func startReplica(t *testing.T, c *cluster.Cluster, ns, id string, dieable bool) *replica {
	t.Helper()
	cfg := Config{Buckets: 6, Namespace: ns, Prefix: "collector", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, Identity: id}
	if err := cfg.Validate(""); err != nil {
		t.Fatal(err)
	}
	r := &replica{done: make(chan struct{})}
	rc := c.Config()
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if r.dead.Load() {
				return nil, errors.New("replica is dead")
			}
			return rt.RoundTrip(req)
		})
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	r.set = New(cfg, client, func() { r.changes.Add(1) }, prometheus.NewRegistry(), zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { _ = r.set.Run(ctx); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ns/target-%d", i)
	}
	return out
}

// waitSplit waits until every key is owned by exactly one of rs.
func waitSplit(t *testing.T, within time.Duration, rs ...*replica) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, within, "every key owned by exactly one replica", func() bool {
		for _, k := range keys(60) {
			n := 0
			for _, r := range rs {
				if r.set.Owns(k) {
					n++
				}
			}
			if n != 1 {
				return false
			}
		}
		return true
	}, func() string {
		owned := make([]int, len(rs))
		for i, r := range rs {
			owned[i] = r.set.Owned()
		}
		return fmt.Sprintf("buckets owned: %v", owned)
	})
	return time.Since(start)
}

func TestReplicasSplitBucketsAndTakeOverFromADeadOne(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	a := startReplica(t, c, ns, "10.0.0.1:9001", true)
	b := startReplica(t, c, ns, "10.0.0.2:9001", true)
	waitSplit(t, 30*time.Second, a, b)
	// Both campaign at once; give the split a moment and check both took part.
	// Member Leases make them share: each ends up with its preferred buckets.
	testkit.Eventually(t, 10*time.Second, "both replicas holding the 6 buckets between them", func() bool {
		return a.set.Owned() > 0 && b.set.Owned() > 0 && a.set.Owned()+b.set.Owned() == 6
	}, func() string { return fmt.Sprintf("a holds %d, b %d", a.set.Owned(), b.set.Owned()) })
	t.Logf("a holds %d, b holds %d of 6 buckets", a.set.Owned(), b.set.Owned())
	// Each replica learns the other's holdings as it watches the leases.
	for _, r := range []*replica{a, b} {
		testkit.Eventually(t, 5*time.Second, r.set.cfg.Identity+" naming the holder of ns/target-1", func() bool {
			holder, mine := r.set.Owner("ns/target-1")
			return holder != "" && mine == (holder == r.set.cfg.Identity)
		}, func() string {
			holder, mine := r.set.Owner("ns/target-1")
			return fmt.Sprintf("Owner = %q, %v", holder, mine)
		})
	}

	// a dies without releasing its leases: b takes its buckets once they
	// expire, within one lease duration (plus a retry period).
	hadA := a.set.Owned()
	a.dead.Store(true)
	a.cancel()
	<-a.done
	took := waitSplit(t, 3*time.Second+2*250*time.Millisecond+2*time.Second, b)
	if b.set.Owned() != 6 {
		t.Fatalf("b owns %d of 6 buckets after a died", b.set.Owned())
	}
	t.Logf("b took a's %d buckets %s after a died (lease duration 3s)", hadA, took)
	// A standby times the lease from when it saw the last renewal, which
	// it polls every retry period with client-go's jitter (up to 2.2×): the
	// bound is one lease duration plus two jittered retry periods.
	// Half a second more for API calls on a loaded 2-core machine.
	if bound := 3*time.Second + 2*2200*time.Millisecond/4 + 500*time.Millisecond; hadA > 0 && took > bound {
		t.Errorf("takeover took %s, want within one lease duration (3s) plus two jittered retry periods (%s)", took, bound)
	}
}

func TestStoppedReplicaReleasesAtOnce(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	a := startReplica(t, c, ns, "a:1", false)
	waitSplit(t, 30*time.Second, a)
	b := startReplica(t, c, ns, "b:1", false)
	a.cancel()
	<-a.done
	took := waitSplit(t, 3*time.Second, b)
	if took > 2*time.Second {
		t.Errorf("b took the released buckets after %s, want about one retry period", took)
	}
	if a.changes.Load() == 0 || b.changes.Load() == 0 {
		t.Errorf("ownership changes seen: a %d, b %d; want both notified", a.changes.Load(), b.changes.Load())
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Buckets: 4, Namespace: "x", Prefix: "p", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Identity: "a:1"}
	if err := good.Validate(""); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Config){
		"--buckets":         func(c *Config) { c.Buckets = -1 },
		"--lease-duration":  func(c *Config) { c.RenewDeadline = c.LeaseDuration },
		"--lease-namespace": func(c *Config) { c.Namespace = "" },
	} {
		c := good
		f(&c)
		if err := c.Validate(""); err == nil || !contains(err.Error(), name) {
			t.Errorf("Validate = %v, want an error naming %s", err, name)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestDeadHoldersBucketsMoveWithinOneLeaseDuration times each bucket's
// move from the last renewal its dead holder wrote: the survivor must not
// take it before the lease runs out, and must take it within one lease
// duration plus one jittered retry period (client-go waits 1 to 2.2 retry
// periods between tries).
func TestDeadHoldersBucketsMoveWithinOneLeaseDuration(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	a := startReplica(t, c, ns, "10.0.1.1:9001", true)
	b := startReplica(t, c, ns, "10.0.1.2:9001", true)
	waitSplit(t, 30*time.Second, a, b)
	// Settled: each bucket is held by its preferred owner, so a holds only
	// buckets b has no reason to campaign for while a lives.
	testkit.Eventually(t, 10*time.Second, "the buckets settled with their preferred owners", func() bool { return settled(a, b) },
		func() string { return fmt.Sprintf("a holds %d, b %d of 6", a.set.Owned(), b.set.Owned()) })
	a.dead.Store(true)
	a.cancel()
	<-a.done

	// a's last renewal of each of its buckets, as the Leases hold it.
	lastRenewal := map[int]time.Time{}
	for i := range 6 {
		l, err := c.Client.CoordinationV1().Leases(ns).Get(context.Background(), a.set.bucketName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := l.Spec.HolderIdentity; h != nil && *h == a.set.cfg.Identity {
			lastRenewal[i] = l.Spec.RenewTime.Time
		}
	}
	if len(lastRenewal) == 0 {
		t.Fatal("a held no bucket Lease when it died")
	}
	// Each poll times the buckets b has newly taken.
	taken := map[int]time.Time{}
	testkit.Eventually(t, 4*3*time.Second, "b to take a's buckets", func() bool {
		b.set.mu.RLock()
		defer b.set.mu.RUnlock()
		for i := range lastRenewal {
			if _, ok := taken[i]; !ok && b.set.mine[i] {
				taken[i] = time.Now()
			}
		}
		return len(taken) == len(lastRenewal)
	}, func() string { return fmt.Sprintf("b took %d of a's %d buckets", len(taken), len(lastRenewal)) })
	const lease, retry = 3 * time.Second, 250 * time.Millisecond
	// Half a second for API calls on a loaded 2-core machine.
	bound := lease + 2200*retry/1000 + 500*time.Millisecond
	for i, renewed := range lastRenewal {
		took := taken[i].Sub(renewed)
		t.Logf("bucket %d moved %s after a's last renewal (lease duration %s)", i, took.Round(time.Millisecond), lease)
		if took < lease {
			t.Errorf("bucket %d moved %s after a's last renewal, before its lease (%s) ran out", i, took, lease)
		}
		if took > bound {
			t.Errorf("bucket %d moved %s after a's last renewal; want within one lease duration and a jittered retry period (%s)", i, took, bound)
		}
	}
}

// settled reports whether a and b share the buckets, each held by the
// replica both see as its preferred owner.
func settled(a, b *replica) bool {
	if a.set.Owned() == 0 || b.set.Owned() == 0 {
		return false
	}
	for i := range a.set.cfg.Buckets {
		pa, pb := a.set.preferred(i), b.set.preferred(i)
		if pa != pb {
			return false
		}
		a.set.mu.RLock()
		aHolds := a.set.mine[i]
		a.set.mu.RUnlock()
		b.set.mu.RLock()
		bHolds := b.set.mine[i]
		b.set.mu.RUnlock()
		if aHolds == bHolds || aHolds != (pa == a.set.cfg.Identity) {
			return false
		}
	}
	return true
}
