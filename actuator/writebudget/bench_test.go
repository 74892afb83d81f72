package writebudget

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidalscale/tidal/fairqueue"
)

// BenchmarkQueue is the queue's cost per request at 1,000 waiting across 10
// namespaces and the three classes: one Add and its share of a Grant.
func BenchmarkQueue(b *testing.B) {
	const waiting = 1000
	q := NewQueue(1000, 1, waiting+1, t0)
	q.TryTake(t0)
	ws := make([]*Waiter, waiting)
	for i := range ws {
		ws[i] = &Waiter{Class: Class(i % int(fairqueue.NumClasses)), Namespace: fmt.Sprint("ns", i%10)}
		if err := q.Add(ws[i], t0); err != nil {
			b.Fatal(err)
		}
	}
	now := t0
	buf := make([]*Waiter, 0, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		// One token a millisecond: each Grant hands out one, which goes
		// back in at the end of its class.
		now = now.Add(time.Millisecond)
		g, _ := q.Grant(now, buf[:0])
		if len(g) != 1 {
			b.Fatalf("granted %d", len(g))
		}
		if err := q.Add(g[0], now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaims is a claim and its release for one of 1,000 targets.
func BenchmarkClaims(b *testing.B) {
	cs := NewClaims(2000)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("ns/target-", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c, err := cs.Claim(keys[i%len(keys)], "ns", Down, uint64(i+1))
		if err != nil {
			b.Fatal(err)
		}
		cs.Release(c)
	}
}
