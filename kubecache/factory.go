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
// namespace, and one Namespaced informer per resource made from the parts'
// informers of it.
type multiFactory[G genericInformers, F partFactory[G]] struct {
	namespaces []string
	scheme     *runtime.Scheme
	parts      []F

	// mu guards byResource and types.
	mu         sync.Mutex
	byResource map[schema.GroupVersionResource]*Namespaced
	types      map[schema.GroupVersionResource]reflect.Type
}

func newMultiFactory[G genericInformers, F partFactory[G]](namespaces []string, scheme *runtime.Scheme, newPart func(ns string) F) *multiFactory[G, F] {
	f := &multiFactory[G, F]{namespaces: slices.Clone(namespaces), scheme: scheme,
		byResource: map[schema.GroupVersionResource]*Namespaced{}, types: map[schema.GroupVersionResource]reflect.Type{}}
	for _, ns := range namespaces {
		f.parts = append(f.parts, newPart(ns))
	}
	return f
}

// informerFor is the joined informer of obj's resource. obj is always a
// type of the factory's own clientset, so failing to name its resource is
// a programming error.
func (f *multiFactory[G, F]) informerFor(obj runtime.Object) cache.SharedIndexInformer {
	gvks, _, err := f.scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		panic(fmt.Sprintf("kubecache: no kind for %T: %v", obj, err))
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	inf, err := f.joined(gvr, reflect.TypeOf(obj))
	if err != nil {
		panic(fmt.Sprintf("kubecache: %T: %v", obj, err))
	}
	return inf
}

// joined is the Namespaced informer of gvr, made on first use.
func (f *multiFactory[G, F]) joined(gvr schema.GroupVersionResource, typ reflect.Type) (*Namespaced, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.byResource[gvr]; ok {
		return inf, nil
	}
	parts := make([]cache.SharedIndexInformer, len(f.parts))
	for i, p := range f.parts {
		g, err := p.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		parts[i] = g.Informer()
	}
	inf := NewNamespaced(f.namespaces, parts)
	f.byResource[gvr] = inf
	if typ != nil {
		f.types[gvr] = typ
	}
	return inf, nil
}

// InformerName is nil: the parts' informers publish no metrics by name.
func (f *multiFactory[G, F]) InformerName() *cache.InformerName { return nil }

func (f *multiFactory[G, F]) ForResource(gvr schema.GroupVersionResource) (G, error) {
	inf, err := f.joined(gvr, nil)
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

func (f *multiFactory[G, F]) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	f.mu.Lock()
	joined, types := maps.Clone(f.byResource), maps.Clone(f.types)
	f.mu.Unlock()
	out := map[reflect.Type]bool{}
	for gvr, inf := range joined {
		out[types[gvr]] = cache.WaitForCacheSync(stopCh, inf.HasSynced)
	}
	return out
}

func (f *multiFactory[G, F]) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	res := cache.SyncResult{Synced: f.WaitForCacheSync(ctx.Done())}
	for _, ok := range res.Synced {
		if !ok {
			res.Err = context.Cause(ctx)
		}
	}
	return res
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
	return f.informerFor(obj)
}

// tidalFactory is tidal's factory over several namespaces.
type tidalFactory struct {
	*multiFactory[tidalinformers.GenericInformer, tidalinformers.SharedInformerFactory]
}

var _ tidalinformers.SharedInformerFactory = (*tidalFactory)(nil)

func (f *tidalFactory) Autoscaling() autoscaling.Interface { return autoscaling.New(f, "", nil) }
func (f *tidalFactory) Functions() functions.Interface     { return functions.New(f, "", nil) }

func (f *tidalFactory) InformerFor(obj runtime.Object, _ tidalinternal.NewInformerFunc) cache.SharedIndexInformer {
	return f.informerFor(obj)
}
