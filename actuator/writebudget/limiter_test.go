package writebudget

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidalscale/tidal/test/testkit"
)

// waitFor runs l.Wait under claim c (nil for none) in a goroutine the test
// waits for, and sends its result on the returned channel.
func waitFor(t *testing.T, wg *sync.WaitGroup, ctx context.Context, l *Limiter, c *Claim) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	if c != nil {
		ctx = WithClaim(ctx, c)
	}
	wg.Go(func() { done <- l.Wait(ctx) })
	return done
}

func claim(t *testing.T, cs *Claims, key, ns string, class Class, seq uint64) *Claim {
	t.Helper()
	c, err := cs.Claim(key, ns, class, seq)
	if err != nil {
		t.Fatalf("Claim(%s, %d): %v", key, seq, err)
	}
	return c
}

func TestLimiterGrantsByClassAndSupersedes(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(10, 1, 100, clk, nil)
	defer l.Stop()
	cs := l.Claims(100)
	if !l.TryAccept() || l.TryAccept() {
		t.Fatal("burst 1: one token at once, then none")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx := context.Background()

	down1 := waitFor(t, &wg, ctx, l, claim(t, cs, "a/one", "a", Down, 100))
	down2 := waitFor(t, &wg, ctx, l, claim(t, cs, "a/two", "a", Down, 100))
	testkit.Eventually(t, 5*time.Second, "two downs waiting", func() bool { return l.Waiting(Down) == 2 })
	// A newer decision for a/one wakes it from zero: the older gives way at
	// once, and the newer goes first.
	wake := waitFor(t, &wg, ctx, l, claim(t, cs, "a/one", "a", Wake, 200))
	if err := <-down1; !errors.Is(err, ErrSuperseded) {
		t.Fatalf("superseded down: %v", err)
	}
	var se *SupersededError
	if _, err := cs.Claim("a/one", "a", Up, 150); !errors.As(err, &se) || se.Sequence != 200 {
		t.Errorf("an older decision's claim: %v, want superseded by 200", err)
	}
	testkit.Eventually(t, 5*time.Second, "the wake waiting", func() bool { return l.Waiting(Wake) == 1 })
	step(t, clk, 100*time.Millisecond)
	if err := <-wake; err != nil {
		t.Fatalf("wake: %v", err)
	}
	select {
	case err := <-down2:
		t.Fatalf("down granted before its token: %v", err)
	default:
	}
	// A request of no claim waits as Up: before the down.
	plain := waitFor(t, &wg, ctx, l, nil)
	testkit.Eventually(t, 5*time.Second, "the plain request waiting", func() bool { return l.Waiting(Up) == 1 })
	step(t, clk, 100*time.Millisecond)
	if err := <-plain; err != nil {
		t.Fatalf("plain: %v", err)
	}
	step(t, clk, 100*time.Millisecond)
	if err := <-down2; err != nil {
		t.Fatalf("down: %v", err)
	}
}

func TestLimiterCancel(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(1, 1, 100, clk, nil)
	l.Accept()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	done := waitFor(t, &wg, ctx, l, nil)
	testkit.Eventually(t, 5*time.Second, "waiting", func() bool { return l.Waiting(Up) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if l.Waiting(Up) != 0 {
		t.Error("a cancelled request still waits")
	}
	// Its token was not spent.
	clk.Step(time.Second)
	if !l.TryAccept() {
		t.Error("the token a cancelled request waited for is gone")
	}
	l.Stop()
	if l.TryAccept() || l.Wait(context.Background()) == nil {
		t.Error("a stopped limiter let a request through")
	}
}

func TestLimiterBound(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(1, 1, 1, clk, nil)
	defer l.Stop()
	l.Accept()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := waitFor(t, &wg, ctx, l, nil)
	testkit.Eventually(t, 5*time.Second, "waiting", func() bool { return l.Waiting(Up) == 1 })
	if err := l.Wait(ctx); !errors.Is(err, ErrFull) {
		t.Errorf("second waiter of a bound of 1: %v, want ErrFull", err)
	}
	cancel()
	<-first
}

func TestClaims(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    uint64 // sequence of the claim there; 0 is a reconcile
		claim   uint64
		wantErr bool
	}{
		{name: "newer decision", held: 5, claim: 6},
		{name: "same decision again", held: 5, claim: 5},
		{name: "older decision", held: 5, claim: 4, wantErr: true},
		{name: "decision over a reconcile", held: 0, claim: 4},
		{name: "reconcile over a decision", held: 5, claim: 0, wantErr: true},
		{name: "reconcile over a reconcile", held: 0, claim: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := NewClaims(10)
			old := claim(t, cs, "ns/a", "ns", Down, tc.held)
			c, err := cs.Claim("ns/a", "ns", Up, tc.claim)
			if tc.wantErr {
				if !errors.Is(err, ErrSuperseded) || old.Err() != nil {
					t.Fatalf("Claim: %v, held claim %v; want refused, held kept", err, old.Err())
				}
				cs.Release(old)
			} else {
				if err != nil || !errors.Is(old.Err(), ErrSuperseded) {
					t.Fatalf("Claim: %v, held claim %v; want taken over", err, old.Err())
				}
				// The superseded one's release leaves the newer in place.
				cs.Release(old)
				if cs.Len() != 1 {
					t.Fatalf("%d slots after the old claim's release, want 1", cs.Len())
				}
				cs.Release(c)
			}
			if cs.Len() != 0 {
				t.Errorf("%d slots after every release", cs.Len())
			}
		})
	}
	cs := NewClaims(1)
	claim(t, cs, "ns/a", "ns", Up, 1)
	if _, err := cs.Claim("ns/b", "ns", Up, 1); !errors.Is(err, ErrFull) {
		t.Errorf("a second target over a bound of 1: %v, want ErrFull", err)
	}
	if _, err := cs.Claim("ns/a", "ns", Up, 2); err != nil {
		t.Errorf("a newer decision for a held target at the bound: %v", err)
	}
}

// step moves clk on once the dispatcher waits for its timer.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "the dispatcher's timer", clk.HasWaiters)
	clk.Step(d)
}

// TestPrepay: the wait Prepay makes ends with its caller's context, and the
// request made under the context it returns does not wait again.
func TestPrepay(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(1, 1, 10, clk, nil)
	defer l.Stop()
	cs := l.Claims(10)
	ctx := WithClaim(context.Background(), claim(t, cs, "ns/a", "ns", Wake, 1))
	paid, err := cs.Prepay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The bucket is empty now, yet the prepaid request goes at once, once.
	if err := l.Wait(paid); err != nil {
		t.Fatalf("prepaid Wait: %v", err)
	}
	short, cancel := context.WithCancel(paid)
	cancel()
	if err := l.Wait(short); !errors.Is(err, context.Canceled) {
		t.Errorf("a second request under a used prepaid context: %v, want it to wait (and be cancelled)", err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cs.Prepay(gone); !errors.Is(err, context.Canceled) {
		t.Errorf("Prepay with a cancelled context: %v", err)
	}
	if _, err := NewClaims(1).Prepay(ctx); err != nil {
		t.Errorf("Prepay without a limiter: %v", err)
	}
}

// TestLimiterWaitLimit: a pass's first request waits only until its
// context's wait limit and is deferred there, counted, its place given up;
// a pass that has sent a request already keeps waiting past it.
func TestLimiterWaitLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(1, 1, 10, clk, nil)
	defer l.Stop()
	cs := l.Claims(10)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx := WithWaitLimit(context.Background(), t0.Add(500*time.Millisecond))

	// A pass whose first request took the one token there was.
	started := claim(t, cs, "a/started", "a", Up, 1)
	if err := l.Wait(WithClaim(context.Background(), started)); err != nil {
		t.Fatal(err)
	}
	down := waitFor(t, &wg, ctx, l, claim(t, cs, "a/down", "a", Down, 1))
	second := waitFor(t, &wg, ctx, l, started)
	testkit.Eventually(t, 5*time.Second, "both waiting", func() bool { return l.Waiting(Up) == 1 && l.Waiting(Down) == 1 })
	// At the limit, no token yet (the next is at t0 + 1s): the first
	// request of a pass is deferred, the started pass's second waits on.
	step(t, clk, 500*time.Millisecond)
	var de *DeferredError
	if err := <-down; !errors.As(err, &de) || !errors.Is(err, ErrDeferred) || de.Class != Down || de.Waited != 500*time.Millisecond || de.Waiting != 2 {
		t.Fatalf("down at its wait limit: %v, want deferred in class down after 500ms with 2 waiting", err)
	}
	if l.Waiting(Down) != 0 || l.Waiting(Up) != 1 {
		t.Errorf("waiting: down %d, up %d; want the deferred one gone, the started pass's there", l.Waiting(Down), l.Waiting(Up))
	}
	step(t, clk, 500*time.Millisecond)
	if err := <-second; err != nil {
		t.Errorf("a started pass's request past the wait limit: %v, want it let through", err)
	}
	// Past the limit and no token: deferred at once.
	if err := l.Wait(WithClaim(ctx, claim(t, cs, "a/late", "a", Wake, 1))); !errors.As(err, &de) || de.Waited != 0 || de.Class != Wake || de.Waiting != 1 {
		t.Errorf("a request whose limit has passed: %v, want deferred at once", err)
	}
	// A token free: the limit does not matter.
	clk.Step(time.Second)
	if err := l.Wait(ctx); err != nil {
		t.Errorf("a request past its limit with a token free: %v", err)
	}
}

// TestLimiterExpired checks that a request whose context ends while it
// waits is counted by whether its pass had written already: a started
// pass's later request waits without the deferral's limit, so only there
// may a caller's deadline pass in the queue.
func TestLimiterExpired(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLimiter(1, 1, 10, clk, nil)
	defer l.Stop()
	cs := l.Claims(10)
	var wg sync.WaitGroup
	defer wg.Wait()

	started := claim(t, cs, "a/started", "a", Down, 1)
	if err := l.Wait(WithClaim(context.Background(), started)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	later := waitFor(t, &wg, ctx, l, started)
	first := waitFor(t, &wg, ctx, l, claim(t, cs, "a/new", "a", Down, 1))
	testkit.Eventually(t, 5*time.Second, "both waiting", func() bool { return l.Waiting(Down) == 2 })
	cancel()
	for _, done := range []<-chan error{later, first} {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a wait whose context ended: %v, want context.Canceled", err)
		}
	}
	for _, request := range []string{requestFirst, requestLater} {
		var m dto.Metric
		if err := l.expired.WithLabelValues("down", request).Write(&m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetCounter().GetValue(); n != 1 {
			t.Errorf("expired{class=down, request=%s} = %g, want 1", request, n)
		}
	}
}
