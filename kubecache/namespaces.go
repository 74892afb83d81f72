package kubecache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/keyval"
)

// Namespaced joins one informer per namespace into one: the informer a
// controller sees when tidal watches a list of namespaces (--namespaces)
// rather than the whole cluster, so that its RBAC can be Roles in those
// namespaces instead of a ClusterRole. Handlers, indexers and transforms go
// to every part; the store answers from the part of an object's namespace,
// and a listing is the parts' listings joined. Add indexers and handlers
// before the parts start, as with any informer.
type Namespaced struct {
	namespaces []string
	parts      []cache.SharedIndexInformer
	indexer    *namespacedIndexer
}

var _ cache.SharedIndexInformer = (*Namespaced)(nil)

// NewNamespaced joins parts, the informers of namespaces in the same order.
func NewNamespaced(namespaces []string, parts []cache.SharedIndexInformer) *Namespaced {
	n := &Namespaced{namespaces: slices.Clone(namespaces), parts: slices.Clone(parts)}
	n.indexer = &namespacedIndexer{byNS: map[string]cache.Indexer{}}
	for i, ns := range n.namespaces {
		n.indexer.order = append(n.indexer.order, parts[i].GetIndexer())
		n.indexer.byNS[ns] = parts[i].GetIndexer()
	}
	return n
}

// AddEventHandler adds h to every part.
func (n *Namespaced) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return n.add(func(p cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return p.AddEventHandler(h)
	})
}

// AddEventHandlerWithResyncPeriod adds h to every part.
func (n *Namespaced) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return n.add(func(p cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return p.AddEventHandlerWithResyncPeriod(h, resync)
	})
}

// AddEventHandlerWithOptions adds h to every part.
func (n *Namespaced) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return n.add(func(p cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return p.AddEventHandlerWithOptions(h, o)
	})
}

func (n *Namespaced) add(f func(cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error)) (cache.ResourceEventHandlerRegistration, error) {
	reg := &namespacedRegistration{}
	for _, p := range n.parts {
		r, err := f(p)
		if err != nil {
			_ = n.RemoveEventHandler(reg)
			return nil, err
		}
		reg.parts = append(reg.parts, r)
	}
	return reg, nil
}

// RemoveEventHandler removes a handler AddEventHandler added.
func (n *Namespaced) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	reg, ok := handle.(*namespacedRegistration)
	if !ok {
		return fmt.Errorf("kubecache: registration %T is not a namespaced informer's", handle)
	}
	var errs []error
	for i, r := range reg.parts {
		errs = append(errs, n.parts[i].RemoveEventHandler(r))
	}
	return errors.Join(errs...)
}

// GetStore is the joined store.
func (n *Namespaced) GetStore() cache.Store { return n.indexer }

// GetIndexer is the joined indexer.
func (n *Namespaced) GetIndexer() cache.Indexer { return n.indexer }

// GetController is n, a controller over the parts.
func (n *Namespaced) GetController() cache.Controller { return n }

// Run runs every part until stopCh closes, and returns when they all have.
func (n *Namespaced) Run(stopCh <-chan struct{}) { n.RunWithContext(wait.ContextForChannel(stopCh)) }

// RunWithContext runs every part until ctx ends, and returns when they
// all have.
func (n *Namespaced) RunWithContext(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range n.parts {
		wg.Go(func() { p.RunWithContext(ctx) })
	}
	wg.Wait()
}

// HasSynced reports whether every part has synced.
func (n *Namespaced) HasSynced() bool {
	return !slices.ContainsFunc(n.parts, func(p cache.SharedIndexInformer) bool { return !p.HasSynced() })
}

// HasSyncedChecker is done when every part's is.
func (n *Namespaced) HasSyncedChecker() cache.DoneChecker {
	return newAllDone("namespaces "+strings.Join(n.namespaces, ","), n.parts)
}

// LastSyncResourceVersion is the parts' versions joined; it is opaque to
// callers, as a single informer's is.
func (n *Namespaced) LastSyncResourceVersion() string {
	return joinVersions(n.parts, cache.SharedIndexInformer.LastSyncResourceVersion)
}

// joinVersions joins the parts' resource versions, in order.
func joinVersions[P any](parts []P, version func(P) string) string {
	vs := make([]string, len(parts))
	for i, p := range parts {
		vs[i] = version(p)
	}
	return strings.Join(vs, ",")
}

// SetWatchErrorHandler sets h on every part.
func (n *Namespaced) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return n.each(func(p cache.SharedIndexInformer) error { return p.SetWatchErrorHandler(h) })
}

// SetWatchErrorHandlerWithContext sets h on every part.
func (n *Namespaced) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	return n.each(func(p cache.SharedIndexInformer) error { return p.SetWatchErrorHandlerWithContext(h) })
}

// SetTransform sets t on every part.
func (n *Namespaced) SetTransform(t cache.TransformFunc) error {
	return n.each(func(p cache.SharedIndexInformer) error { return p.SetTransform(t) })
}

// IsStopped reports whether every part has stopped.
func (n *Namespaced) IsStopped() bool {
	return !slices.ContainsFunc(n.parts, func(p cache.SharedIndexInformer) bool { return !p.IsStopped() })
}

// AddIndexers adds indexers to every part.
func (n *Namespaced) AddIndexers(indexers cache.Indexers) error {
	return n.each(func(p cache.SharedIndexInformer) error { return p.AddIndexers(indexers) })
}

func (n *Namespaced) each(f func(cache.SharedIndexInformer) error) error {
	for i, p := range n.parts {
		if err := f(p); err != nil {
			return fmt.Errorf("informer of namespace %s: %w", n.namespaces[i], err)
		}
	}
	return nil
}

// namespacedRegistration is a handler's registration on every part.
type namespacedRegistration struct {
	parts []cache.ResourceEventHandlerRegistration
}

func (r *namespacedRegistration) HasSynced() bool {
	return !slices.ContainsFunc(r.parts, func(p cache.ResourceEventHandlerRegistration) bool { return !p.HasSynced() })
}

func (r *namespacedRegistration) HasSyncedChecker() cache.DoneChecker {
	return newAllDone("namespaced handler", r.parts)
}

// allDone is done when every one of parts is.
type allDone struct {
	name  string
	parts []cache.DoneChecker
}

func newAllDone[P interface{ HasSyncedChecker() cache.DoneChecker }](name string, parts []P) allDone {
	a := allDone{name: name}
	for _, p := range parts {
		a.parts = append(a.parts, p.HasSyncedChecker())
	}
	return a
}

func (a allDone) Name() string { return a.name }

// Done returns a channel closed once every part is done. Its goroutine
// ends then; callers wait on it only for informers that run.
func (a allDone) Done() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, p := range a.parts {
			<-p.Done()
		}
		close(done)
	}()
	return done
}

// errNotWatched is an object of a namespace no part holds.
var errNotWatched = errors.New("namespace not watched")

// namespacedIndexer answers from the part of an object's namespace, and
// joins the parts for listings.
type namespacedIndexer struct {
	byNS  map[string]cache.Indexer
	order []cache.Indexer
}

var _ cache.Indexer = (*namespacedIndexer)(nil)

func (x *namespacedIndexer) of(obj any) (cache.Indexer, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	ix, ok := x.byNS[m.GetNamespace()]
	if !ok {
		return nil, fmt.Errorf("%w: %q", errNotWatched, m.GetNamespace())
	}
	return ix, nil
}

// route applies write to obj in the part of its namespace.
func (x *namespacedIndexer) route(obj any, write func(cache.Indexer, any) error) error {
	ix, err := x.of(obj)
	if err != nil {
		return err
	}
	return write(ix, obj)
}

func (x *namespacedIndexer) Add(obj any) error    { return x.route(obj, cache.Indexer.Add) }
func (x *namespacedIndexer) Update(obj any) error { return x.route(obj, cache.Indexer.Update) }
func (x *namespacedIndexer) Delete(obj any) error { return x.route(obj, cache.Indexer.Delete) }

func (x *namespacedIndexer) List() []any {
	out, _ := gather(x.order, func(ix cache.Indexer) ([]any, error) { return ix.List(), nil })
	return out
}

func (x *namespacedIndexer) ListKeys() []string {
	out, _ := gather(x.order, func(ix cache.Indexer) ([]string, error) { return ix.ListKeys(), nil })
	return out
}

// gather joins what f answers of each of parts, in order; the first error
// ends it.
func gather[T any](parts []cache.Indexer, f func(cache.Indexer) ([]T, error)) ([]T, error) {
	var out []T
	for _, ix := range parts {
		v, err := f(ix)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

// indexed is the parts an index lookup asks: of the namespace index, only
// the part of that namespace (none when it is not watched).
func (x *namespacedIndexer) indexed(name, value string) []cache.Indexer {
	if name != cache.NamespaceIndex {
		return x.order
	}
	if ix, ok := x.byNS[value]; ok {
		return []cache.Indexer{ix}
	}
	return nil
}

// LastStoreSyncResourceVersion is opaque, as LastSyncResourceVersion.
func (x *namespacedIndexer) LastStoreSyncResourceVersion() string {
	return joinVersions(x.order, cache.Indexer.LastStoreSyncResourceVersion)
}

// Bookmark is for a reflector, which writes to the parts, never here.
func (x *namespacedIndexer) Bookmark(string) {}

func (x *namespacedIndexer) Get(obj any) (any, bool, error) {
	ix, err := x.of(obj)
	if errors.Is(err, errNotWatched) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return ix.Get(obj)
}

func (x *namespacedIndexer) GetByKey(key string) (any, bool, error) {
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, false, err
	}
	ix, ok := x.byNS[ns]
	if !ok {
		return nil, false, nil
	}
	return ix.GetByKey(key)
}

// Replace is for a reflector, which writes to the parts, never here.
func (x *namespacedIndexer) Replace([]any, string) error {
	return errors.New("kubecache: a namespaced store is replaced part by part")
}

func (x *namespacedIndexer) Resync() error {
	for _, ix := range x.order {
		if err := ix.Resync(); err != nil {
			return err
		}
	}
	return nil
}

func (x *namespacedIndexer) Index(name string, obj any) ([]any, error) {
	return gather(x.order, func(ix cache.Indexer) ([]any, error) { return ix.Index(name, obj) })
}

func (x *namespacedIndexer) IndexKeys(name, value string) ([]string, error) {
	return gather(x.indexed(name, value), func(ix cache.Indexer) ([]string, error) { return ix.IndexKeys(name, value) })
}

func (x *namespacedIndexer) ListIndexFuncValues(name string) []string {
	seen := map[string]bool{}
	var out []string
	for _, ix := range x.order {
		for _, v := range ix.ListIndexFuncValues(name) {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

func (x *namespacedIndexer) ByIndex(name, value string) ([]any, error) {
	return gather(x.indexed(name, value), func(ix cache.Indexer) ([]any, error) { return ix.ByIndex(name, value) })
}

func (x *namespacedIndexer) GetIndexers() cache.Indexers {
	if len(x.order) == 0 {
		return cache.Indexers{}
	}
	return x.order[0].GetIndexers()
}

func (x *namespacedIndexer) AddIndexers(indexers cache.Indexers) error {
	for _, ix := range x.order {
		if err := ix.AddIndexers(indexers); err != nil {
			return err
		}
	}
	return nil
}

// Namespaces is the --namespaces flag of the services that watch the
// cluster: a comma-separated list of namespaces, empty for every one.
type Namespaces []string

// maxNamespaces bounds the list: one informer per namespace and resource.
const maxNamespaces = 256

// String implements flag.Value.
func (n *Namespaces) String() string {
	if n == nil {
		return ""
	}
	return strings.Join(*n, ",")
}

// Set implements flag.Value: names, each a Kubernetes namespace name,
// duplicates dropped.
func (n *Namespaces) Set(v string) error {
	var out []string
	for _, name := range keyval.List(v) {
		switch {
		case len(validation.IsDNS1123Label(name)) > 0:
			return fmt.Errorf("namespace %q: want a Kubernetes namespace name (a-z, 0-9, '-', at most 63 bytes)", truncate(name))
		case !slices.Contains(out, name):
			out = append(out, name)
		}
	}
	if len(out) > maxNamespaces {
		return fmt.Errorf("%d namespaces: want at most %d", len(out), maxNamespaces)
	}
	*n = out
	return nil
}

// Watches reports whether ns is watched: every namespace is, with none
// listed.
func (n Namespaces) Watches(ns string) bool { return len(n) == 0 || slices.Contains(n, ns) }

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
