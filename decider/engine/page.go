package engine

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Index lists an engine's decisions a page at a time, in target key order,
// for ListDecisions and the first part of a watch. It keeps the engine's
// targets sorted by key, rebuilt at most once per maxAge and shared by every
// caller, so a page costs a binary search and the page's own decisions
// under the engine's lock, not a walk of every target: a listing of n
// targets in pages of k holds the lock O(n) in all, not O(n²/k), and
// copies at most one page of decisions at a time.
type Index struct {
	e      *Engine
	maxAge time.Duration
	now    func() time.Time

	// mu guards sorted and built, and serialises rebuilds: callers that find
	// the index stale while it is rebuilt wait for that rebuild.
	mu sync.Mutex
	// sorted holds the targets by key as of built; it is never changed in
	// place, so a caller may read the slice it got after mu is released.
	// A target removed since is skipped; one added since is missing until
	// the next rebuild.
	sorted []*target
	built  time.Time
	// created is the engine's count of targets ever created as of built.
	created uint64
}

// NewIndex returns an index over e, rebuilt when older than maxAge (by now).
func NewIndex(e *Engine, maxAge time.Duration, now func() time.Time) *Index {
	return &Index{e: e, maxAge: maxAge, now: now}
}

// snapshot returns the sorted targets. A listing's first page (first) also
// rebuilds when a target was created since, so a new listing shows every
// target made before it; later pages keep the snapshot they started from.
func (x *Index) snapshot(first bool) []*target {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	x.e.mu.Lock()
	created := x.e.created
	x.e.mu.Unlock()
	if x.sorted != nil && now.Sub(x.built) <= x.maxAge && (!first || created == x.created) {
		return x.sorted
	}
	x.e.mu.Lock()
	created = x.e.created
	ts := make([]*target, 0, len(x.e.targets))
	for _, t := range x.e.targets {
		ts = append(ts, t)
	}
	x.e.mu.Unlock()
	// A target's key never changes, so the sort needs no engine lock.
	slices.SortFunc(ts, func(a, b *target) int { return strings.Compare(a.key, b.key) })
	x.sorted, x.built, x.created = ts, now, created
	return ts
}

// Page returns the latest decisions of up to limit targets whose keys sort
// after the cursor after ("" for the first page), in key order, only those
// in namespace unless it is empty. next is the cursor of the following
// page, or "" when this page is the last.
func (x *Index) Page(namespace, after string, limit int) (ds []Decision, next string) {
	ts := x.snapshot(after == "")
	prefix := ""
	if namespace != "" {
		prefix = namespace + "/"
	}
	// Keys with one prefix sort together: from the first one after the
	// cursor to the first one past them. The page is sized for what is
	// there, not for limit: a small namespace's listing stays small.
	i := sort.Search(len(ts), func(i int) bool { return ts[i].key > after && ts[i].key >= prefix })
	end := sort.Search(len(ts), func(i int) bool { return ts[i].key >= prefix && !strings.HasPrefix(ts[i].key, prefix) })
	x.e.mu.Lock()
	defer x.e.mu.Unlock()
	ds = make([]Decision, 0, min(limit, max(end-i, 0)))
	for ; i < end; i++ {
		t := ts[i]
		if x.e.targets[keyOf(t.ref)] != t {
			continue // removed since the index was built
		}
		if len(ds) == limit {
			return ds, ds[len(ds)-1].Target.Key()
		}
		ds = append(ds, x.e.decisionLocked(t, false))
	}
	return ds, ""
}
