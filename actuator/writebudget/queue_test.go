package writebudget

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/fairqueue"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// w is a waiter named id: "<class letter><namespace><n>", e.g. "da1" is the
// first Down waiter of namespace a; "D" is a Continuing Down waiter.
func w(id string) *Waiter {
	c := map[byte]Class{'w': Wake, 'u': Up, 'd': Down, 'D': Down}[id[0]]
	return &Waiter{Class: c, Namespace: id[1:2], Continuing: id[0] == 'D'}
}

func TestQueueGrantOrder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rate        float64
		burst       int
		add         []string // added at t0, in this order, after the bucket is emptied
		after       time.Duration
		want        []string
		wantNext    time.Duration
		wantWaiting int
	}{
		{
			name: "one token, wake before up before down",
			rate: 1, burst: 1, add: []string{"da1", "ua1", "wa1"}, after: time.Second,
			want: []string{"wa1"}, wantNext: time.Second, wantWaiting: 2,
		},
		{
			name: "classes in order, then first come first served",
			rate: 10, burst: 10, add: []string{"da1", "ua1", "da2", "wa1", "ua2"}, after: time.Second,
			want: []string{"wa1", "ua1", "ua2", "da1", "da2"},
		},
		{
			name: "namespaces take turns within a class",
			rate: 10, burst: 10, add: []string{"da1", "da2", "da3", "db1", "dc1", "dc2"}, after: 500 * time.Millisecond,
			want: []string{"da1", "db1", "dc1", "da2", "dc2"}, wantNext: 100 * time.Millisecond, wantWaiting: 1,
		},
		{
			name: "a namespace flooding a lower class does not delay a higher one",
			rate: 2, burst: 2,
			add:   []string{"da1", "da2", "da3", "da4", "ub1", "wc1"},
			after: time.Second,
			want:  []string{"wc1", "ub1"}, wantNext: 500 * time.Millisecond, wantWaiting: 4,
		},
		{
			name: "a pass's next request goes ahead of every new one of its class, in order, not of a higher class",
			rate: 10, burst: 10, add: []string{"da1", "da2", "db1", "Da3", "Db2", "Db3", "uc1"}, after: 500 * time.Millisecond,
			want: []string{"uc1", "Da3", "Db2", "Db3", "da1"}, wantNext: 100 * time.Millisecond, wantWaiting: 2,
		},
		{
			name: "no token yet",
			rate: 4, burst: 1, add: []string{"ua1"}, after: 100 * time.Millisecond,
			wantNext: 150 * time.Millisecond, wantWaiting: 1,
		},
		{
			name: "the bucket holds at most burst tokens",
			rate: 100, burst: 2, add: []string{"ua1", "ua2", "ua3"}, after: time.Hour,
			want: []string{"ua1", "ua2"}, wantNext: 10 * time.Millisecond, wantWaiting: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue(tc.rate, tc.burst, 100, t0)
			for q.TryTake(t0) {
			}
			ids := map[*Waiter]string{}
			for _, id := range tc.add {
				wt := w(id)
				ids[wt] = id
				if err := q.Add(wt, t0); err != nil {
					t.Fatal(err)
				}
			}
			granted, next := q.Grant(t0.Add(tc.after), nil)
			var got []string
			for _, g := range granted {
				got = append(got, ids[g])
			}
			if !slices.Equal(got, tc.want) || next != tc.wantNext || q.Len() != tc.wantWaiting {
				t.Errorf("granted %v, next %s, %d waiting; want %v, %s, %d", got, next, q.Len(), tc.want, tc.wantNext, tc.wantWaiting)
			}
		})
	}
}

func TestQueueTryTake(t *testing.T) {
	q := NewQueue(1, 2, 10, t0)
	var took int
	for range 3 {
		if q.TryTake(t0) {
			took++
		}
	}
	if took != 2 {
		t.Fatalf("a full bucket of 2 gave %d tokens, want exactly 2", took)
	}
	if err := q.Add(w("da1"), t0); err != nil {
		t.Fatal(err)
	}
	// A token earned while someone waits is theirs.
	if q.TryTake(t0.Add(2 * time.Second)) {
		t.Error("TryTake took a token a waiter is due")
	}
	if g, _ := q.Grant(t0.Add(2*time.Second), nil); len(g) != 1 {
		t.Errorf("granted %d, want 1", len(g))
	}
	if !q.TryTake(t0.Add(2 * time.Second)) {
		t.Error("the second token earned is free once nobody waits")
	}
}

func TestQueueRemoveAndBound(t *testing.T) {
	q := NewQueue(1, 1, 3, t0)
	q.TryTake(t0)
	a, b, c := w("da1"), w("db1"), w("ua1")
	for _, x := range []*Waiter{a, b, c} {
		if err := q.Add(x, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Add(w("wa1"), t0); !errors.Is(err, ErrFull) {
		t.Errorf("fourth Add: %v, want ErrFull", err)
	}
	if err := q.Add(a, t0); err == nil {
		t.Error("adding a waiter twice: no error")
	}
	if err := q.Add(&Waiter{Class: fairqueue.NumClasses}, t0); err == nil || !strings.Contains(err.Error(), "no such class") {
		t.Errorf("a class out of range: %v", err)
	}
	if !q.Remove(c) || q.Remove(c) {
		t.Error("Remove: true once, then false")
	}
	// Emptied namespaces and classes are dropped: nothing grows with names.
	if !q.Remove(b) || q.waiting.Namespaces(Down) != 1 || q.waiting.Namespaces(Up) != 0 {
		t.Errorf("namespaces left: down %d, up %d", q.waiting.Namespaces(Down), q.waiting.Namespaces(Up))
	}
	g, next := q.Grant(t0.Add(time.Second), nil)
	if len(g) != 1 || g[0] != a || next != 0 || q.Remove(a) {
		t.Errorf("granted %v, next %s: want a, 0, and a no longer removable", g, next)
	}
}

// TestQueueFairShares: namespaces that keep a class busy share its tokens
// evenly whatever each asks for.
func TestQueueFairShares(t *testing.T) {
	q := NewQueue(10, 100, 1000, t0)
	for q.TryTake(t0) {
	}
	asks := map[string]int{"a": 300, "b": 30, "c": 100}
	for ns, n := range asks {
		for range n {
			if err := q.Add(&Waiter{Class: Down, Namespace: ns}, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]int{}
	g, _ := q.Grant(t0.Add(9*time.Second), nil) // 90 tokens
	for _, x := range g {
		got[x.Namespace]++
	}
	if got["a"] != 30 || got["b"] != 30 || got["c"] != 30 {
		t.Errorf("shares of 90 tokens: %v, want 30 each", got)
	}
}
