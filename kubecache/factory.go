package kubecache

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	kubeinternal "k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalscheme "github.com/tidalscale/tidal/apis/generated/clientset/versioned/scheme"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	"github.com/tidalscale/tidal/apis/generated/informers/externalversions/autoscaling"
	"github.com/tidalscale/tidal/apis/generated/informers/externalversions/functions"
	tidalinternal "github.com/tidalscale/tidal/apis/generated/informers/externalversions/internalinterfaces"
)

// NewKubeInformers is Kubernetes' shared informer factory watching
// namespaces: the whole cluster when there are none, one namespace through
// informers.WithNamespace, and several through one factory per namespace
// whose informers Namespaced joins. The joined factory serves the groups
// tidal reads (core, apps, coordination); asking it for another group is a
// programming error and panics.
func NewKubeInformers(client kubernetes.Interface, resync time.Duration, namespaces []string, opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
	if len(namespaces) == 0 {
		return informers.NewSharedInformerFactoryWithOptions(client, resync, opts...)
	}
	f := newMultiFactory(namespaces, kubescheme.Scheme, func(ns string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(client, resync, append(slices.Clone(opts), informers.WithNamespace(ns))...)
	})
	if len(namespaces) == 1 {
		return f.parts[0]
	}
	return &kubeFactory{multiFactory: f}
}

// NewTidalInformers is NewKubeInformers for tidal's own resources.
func NewTidalInformers(client tidalclient.Interface, resync time.Duration, namespaces []string, opts ...tidalinformers.SharedInformerOption) tidalinformers.SharedInformerFactory {
	if len(namespaces) == 0 {
		return tidalinformers.NewSharedInformerFactoryWithOptions(client, resync, opts...)
	}
	f := newMultiFactory(namespaces, tidalscheme.Scheme, func(ns string) tidalinformers.SharedInformerFactory {
		return tidalinformers.NewSharedInformerFactoryWithOptions(client, resync, append(slices.Clone(opts), tidalinformers.WithNamespace(ns))...)
	})
	if len(namespaces) == 1 {
		return f.parts[0]
	}
	return &tidalFactory{multiFactory: f}
}

// NewNamespacedInformer is newInformer of every namespace of namespaces,
// joined; the whole cluster's (newInformer("")) when there are none.
func NewNamespacedInformer(namespaces []string, newInformer func(namespace string) cache.SharedIndexInformer) cache.SharedIndexInformer {
	switch len(namespaces) {
	case 0:
		return newInformer("")
	case 1:
		return newInformer(namespaces[0])
	}
	parts := make([]cache.SharedIndexInformer, len(namespaces))
	for i, ns := range namespaces {
		parts[i] = newInformer(ns)
	}
	return NewNamespaced(namespaces, parts)
}

// joined makes one Namespaced informer per resource from the parts'
// informers of it.
type joined struct {
	namespaces []string
	scheme     *runtime.Scheme
	part       func(i int, gvr schema.GroupVersionResource) (cache.SharedIndexInformer, error)

	// mu guards byResource and types.
	mu         sync.Mutex
	byResource map[schema.GroupVersionResource]*Namespaced
	types      map[schema.GroupVersionResource]reflect.Type
}

func newJoined(namespaces []string, scheme *runtime.Scheme, part func(int, schema.GroupVersionResource) (cache.SharedIndexInformer, error)) *joined {
	return &joined{namespaces: slices.Clone(namespaces), scheme: scheme, part: part,
		byResource: map[schema.GroupVersionResource]*Namespaced{}, types: map[schema.GroupVersionResource]reflect.Type{}}
}

// informerFor is the joined informer of obj's resource. obj is always a
// type of the factory's own clientset, so failing to name its resource is
// a programming error.
func (j *joined) informerFor(obj runtime.Object) cache.SharedIndexInformer {
	gvks, _, err := j.scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		panic(fmt.Sprintf("kubecache: no kind for %T: %v", obj, err))
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	inf, err := j.forResource(gvr, reflect.TypeOf(obj))
	if err != nil {
		panic(fmt.Sprintf("kubecache: %T: %v", obj, err))
	}
	return inf
}

func (j *joined) forResource(gvr schema.GroupVersionResource, typ reflect.Type) (*Namespaced, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if inf, ok := j.byResource[gvr]; ok {
		return inf, nil
	}
	parts := make([]cache.SharedIndexInformer, len(j.namespaces))
	for i := range j.namespaces {
		p, err := j.part(i, gvr)
		if err != nil {
			return nil, err
		}
		parts[i] = p
	}
	inf := NewNamespaced(j.namespaces, parts)
	j.byResource[gvr] = inf
	if typ != nil {
		j.types[gvr] = typ
	}
	return inf, nil
}

func (j *joined) all() map[schema.GroupVersionResource]*Namespaced {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.byResource)
}

func (j *joined) waitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	out := map[reflect.Type]bool{}
	for gvr, inf := range j.all() {
		j.mu.Lock()
		typ := j.types[gvr]
		j.mu.Unlock()
		out[typ] = cache.WaitForCacheSync(stopCh, inf.HasSynced)
	}
	return out
}

func (j *joined) waitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	res := cache.SyncResult{Synced: j.waitForCacheSync(ctx.Done())}
	for _, ok := range res.Synced {
		if !ok {
			res.Err = context.Cause(ctx)
		}
	}
	return res
}

// genericInformer is a joined informer as a GenericInformer.
type genericInformer struct {
	inf      cache.SharedIndexInformer
	resource schema.GroupResource
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.inf }
func (g genericInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.inf.GetIndexer(), g.resource)
}

// genericInformers is Kubernetes' or tidal's GenericInformer.
type genericInformers interface {
	Informer() cache.SharedIndexInformer
}

// partFactory is what a factory over several namespaces needs of each
// namespace's: Kubernetes' or tidal's generated factory.
type partFactory[G genericInformers] interface {
	ForResource(schema.GroupVersionResource) (G, error)
	Start(stopCh <-chan struct{})
	StartWithContext(ctx context.Context)
	Shutdown()
}

// multiFactory is what kubeFactory and tidalFactory share: one factory per
// namespace, and the informers joined across them.
type multiFactory[G genericInformers, F partFactory[G]] struct {
	joined *joined
	parts  []F
}

// InformerName is nil: the parts' informers publish no metrics by name.
func (f *multiFactory[G, F]) InformerName() *cache.InformerName { return nil }

func (f *multiFactory[G, F]) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	return f.joined.waitForCacheSync(stopCh)
}

func (f *multiFactory[G, F]) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	return f.joined.waitForCacheSyncWithContext(ctx)
}

func newMultiFactory[G genericInformers, F partFactory[G]](namespaces []string, scheme *runtime.Scheme, newPart func(ns string) F) *multiFactory[G, F] {
	parts := make([]F, len(namespaces))
	for i, ns := range namespaces {
		parts[i] = newPart(ns)
	}
	return &multiFactory[G, F]{parts: parts, joined: newJoined(namespaces, scheme, func(i int, gvr schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
		g, err := parts[i].ForResource(gvr)
		if err != nil {
			return nil, err
		}
		return g.Informer(), nil
	})}
}

func (f *multiFactory[G, F]) ForResource(gvr schema.GroupVersionResource) (G, error) {
	inf, err := f.joined.forResource(gvr, nil)
	if err != nil {
		var none G
		return none, err
	}
	// genericInformer is both Kubernetes' and tidal's GenericInformer.
	return any(genericInformer{inf: inf, resource: gvr.GroupResource()}).(G), nil
}

func (f *multiFactory[G, F]) Start(stopCh <-chan struct{}) {
	for _, p := range f.parts {
		p.Start(stopCh)
	}
}

func (f *multiFactory[G, F]) StartWithContext(ctx context.Context) {
	for _, p := range f.parts {
		p.StartWithContext(ctx)
	}
}

func (f *multiFactory[G, F]) Shutdown() {
	for _, p := range f.parts {
		p.Shutdown()
	}
}

// kubeFactory is Kubernetes' factory over several namespaces. The
// interface embedded in unservedKube is nil: only the groups below are
// served.
type kubeFactory struct {
	unservedKube
	*multiFactory[informers.GenericInformer, informers.SharedInformerFactory]
}

// unservedKube puts the nil factory's methods a level below
// multiFactory's, which take precedence.
type unservedKube struct {
	informers.SharedInformerFactory
}

var _ kubeinternal.SharedInformerFactory = (*kubeFactory)(nil)

func (f *kubeFactory) Core() core.Interface                 { return core.New(f, "", nil) }
func (f *kubeFactory) Apps() apps.Interface                 { return apps.New(f, "", nil) }
func (f *kubeFactory) Coordination() coordination.Interface { return coordination.New(f, "", nil) }

func (f *kubeFactory) InformerFor(obj runtime.Object, _ kubeinternal.NewInformerFunc) cache.SharedIndexInformer {
	return f.joined.informerFor(obj)
}

// tidalFactory is tidal's factory over several namespaces.
type tidalFactory struct {
	*multiFactory[tidalinformers.GenericInformer, tidalinformers.SharedInformerFactory]
}

var _ tidalinformers.SharedInformerFactory = (*tidalFactory)(nil)

func (f *tidalFactory) Autoscaling() autoscaling.Interface { return autoscaling.New(f, "", nil) }
func (f *tidalFactory) Functions() functions.Interface     { return functions.New(f, "", nil) }

func (f *tidalFactory) InformerFor(obj runtime.Object, _ tidalinternal.NewInformerFunc) cache.SharedIndexInformer {
	return f.joined.informerFor(obj)
}
