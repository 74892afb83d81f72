// Package client reads and writes Knative's PodAutoscalers and
// ServerlessServices with typed REST clients (client-go's gentype, as
// generated clientsets do) and runs typed informers over them.
//
// Typed rather than dynamic: the informers' caches hold the typed structs
// (about half the memory of unstructured maps, and no conversion on every
// read), the objects are decoded once from JSON, and the fields tidal does
// not declare are never written back: PodAutoscalers are written only
// through their status subresource, whose writes the API server takes
// status alone from, and ServerlessServices are tidal's own (it creates
// them; Knative's controller writes their status, which an update of the
// main resource leaves alone).
package client

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	networkingv1alpha1 "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/kubecache"
)

// Scheme knows the Knative kinds of this module.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	utilruntime.Must(autoscalingv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(networkingv1alpha1.AddToScheme(Scheme))
}

// PodAutoscalers is the typed client of one namespace's PodAutoscalers.
type PodAutoscalers = gentype.ClientWithList[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.PodAutoscalerList]

// ServerlessServices is the typed client of one namespace's
// ServerlessServices.
type ServerlessServices = gentype.ClientWithList[*networkingv1alpha1.ServerlessService, *networkingv1alpha1.ServerlessServiceList]

// Interface reaches Knative's objects; "" is every namespace (for List and
// Watch).
type Interface interface {
	PodAutoscalers(namespace string) *PodAutoscalers
	ServerlessServices(namespace string) *ServerlessServices
}

// Client is the Interface on a real API server.
type Client struct {
	autoscaling, networking rest.Interface
}

var _ Interface = (*Client)(nil)

// New returns a Client for the API server of cfg.
func New(cfg *rest.Config) (*Client, error) {
	as, err := restClient(cfg, autoscalingv1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	nw, err := restClient(cfg, networkingv1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{autoscaling: as, networking: nw}, nil
}

func restClient(cfg *rest.Config, gv schema.GroupVersion) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", gv, err)
	}
	return rc, nil
}

// PodAutoscalers returns the client of namespace's PodAutoscalers.
func (c *Client) PodAutoscalers(namespace string) *PodAutoscalers {
	return gentype.NewClientWithList[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.PodAutoscalerList](
		autoscalingv1alpha1.Resource.Resource, c.autoscaling, parameterCodec, namespace,
		func() *autoscalingv1alpha1.PodAutoscaler { return &autoscalingv1alpha1.PodAutoscaler{} },
		func() *autoscalingv1alpha1.PodAutoscalerList { return &autoscalingv1alpha1.PodAutoscalerList{} })
}

// ServerlessServices returns the client of namespace's ServerlessServices.
func (c *Client) ServerlessServices(namespace string) *ServerlessServices {
	return gentype.NewClientWithList[*networkingv1alpha1.ServerlessService, *networkingv1alpha1.ServerlessServiceList](
		networkingv1alpha1.Resource.Resource, c.networking, parameterCodec, namespace,
		func() *networkingv1alpha1.ServerlessService { return &networkingv1alpha1.ServerlessService{} },
		func() *networkingv1alpha1.ServerlessServiceList { return &networkingv1alpha1.ServerlessServiceList{} })
}

// lister is what an informer needs of a typed client.
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func newInformer[L runtime.Object](c lister[L], obj runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// The cache keeps one copy of every object; managed fields are
	// most of an object's metadata and nothing here reads them.
	utilruntime.Must(inf.SetTransform(kubecache.DropManagedFields))
	return inf
}

// NewPodAutoscalerInformer returns an informer of the PodAutoscalers of
// namespaces (every namespace's when empty); the caller runs it.
func NewPodAutoscalerInformer(c Interface, namespaces []string, resync time.Duration) cache.SharedIndexInformer {
	return kubecache.NewNamespacedInformer(namespaces, func(ns string) cache.SharedIndexInformer {
		return newInformer(c.PodAutoscalers(ns), &autoscalingv1alpha1.PodAutoscaler{}, resync)
	})
}

// NewServerlessServiceInformer returns an informer of the
// ServerlessServices of namespaces (every namespace's when empty); the
// caller runs it.
func NewServerlessServiceInformer(c Interface, namespaces []string, resync time.Duration) cache.SharedIndexInformer {
	return kubecache.NewNamespacedInformer(namespaces, func(ns string) cache.SharedIndexInformer {
		return newInformer(c.ServerlessServices(ns), &networkingv1alpha1.ServerlessService{}, resync)
	})
}

// Get returns the object namespace/name of type T from an informer's store:
// nil, nil when it is not there. Callers treat it as read-only.
func Get[T runtime.Object](store cache.Store, namespace, name string) (T, error) {
	var zero T
	obj, ok, err := store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("%s/%s: the cache holds a %T", namespace, name, obj)
	}
	return t, nil
}
