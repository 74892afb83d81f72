// Package crdclient gives the actuator typed clients, informers and listers
// for tidal's custom resources (PodAutoscaler, Metric, Function, Topic),
// built on client-go's generic client (gentype) and shared informers, so the
// controllers read and write these objects as they do built-in ones.
package crdclient

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
	"k8s.io/client-go/listers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
)

// Scheme holds tidal's custom resource types (and nothing else).
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	utilruntime.Must(autoscalingv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(functionsv1alpha1.AddToScheme(Scheme))
}

// Typed clients of one resource in one namespace ("" for all namespaces,
// for List and Watch only).
type (
	PodAutoscalers = gentype.ClientWithList[*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.PodAutoscalerList]
	Metrics        = gentype.ClientWithList[*autoscalingv1alpha1.Metric, *autoscalingv1alpha1.MetricList]
	Functions      = gentype.ClientWithList[*functionsv1alpha1.Function, *functionsv1alpha1.FunctionList]
	Topics         = gentype.ClientWithList[*functionsv1alpha1.Topic, *functionsv1alpha1.TopicList]
)

// Clientset reaches tidal's two API groups.
type Clientset struct {
	autoscaling rest.Interface
	functions   rest.Interface
}

// NewForConfig returns a Clientset using cfg.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	a, err := restClient(cfg, autoscalingv1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	f, err := restClient(cfg, functionsv1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Clientset{autoscaling: a, functions: f}, nil
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
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	return rc, nil
}

// PodAutoscalers returns the PodAutoscaler client of namespace.
func (c *Clientset) PodAutoscalers(namespace string) *PodAutoscalers {
	return gentype.NewClientWithList("podautoscalers", c.autoscaling, parameterCodec, namespace,
		func() *autoscalingv1alpha1.PodAutoscaler { return &autoscalingv1alpha1.PodAutoscaler{} },
		func() *autoscalingv1alpha1.PodAutoscalerList { return &autoscalingv1alpha1.PodAutoscalerList{} })
}

// Metrics returns the Metric client of namespace.
func (c *Clientset) Metrics(namespace string) *Metrics {
	return gentype.NewClientWithList("metrics", c.autoscaling, parameterCodec, namespace,
		func() *autoscalingv1alpha1.Metric { return &autoscalingv1alpha1.Metric{} },
		func() *autoscalingv1alpha1.MetricList { return &autoscalingv1alpha1.MetricList{} })
}

// Functions returns the Function client of namespace.
func (c *Clientset) Functions(namespace string) *Functions {
	return gentype.NewClientWithList("functions", c.functions, parameterCodec, namespace,
		func() *functionsv1alpha1.Function { return &functionsv1alpha1.Function{} },
		func() *functionsv1alpha1.FunctionList { return &functionsv1alpha1.FunctionList{} })
}

// Topics returns the Topic client of namespace.
func (c *Clientset) Topics(namespace string) *Topics {
	return gentype.NewClientWithList("topics", c.functions, parameterCodec, namespace,
		func() *functionsv1alpha1.Topic { return &functionsv1alpha1.Topic{} },
		func() *functionsv1alpha1.TopicList { return &functionsv1alpha1.TopicList{} })
}

// lister is what an informer needs of a typed client.
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer returns a shared informer over every namespace of a typed
// client's resource, with a namespace index.
func NewInformer[L runtime.Object](c lister[L], example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, example, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Informers are the shared informers of tidal's resources.
type Informers struct {
	PodAutoscalers cache.SharedIndexInformer
	Metrics        cache.SharedIndexInformer
	Functions      cache.SharedIndexInformer
	Topics         cache.SharedIndexInformer
}

// NewInformers returns informers over all namespaces; resync 0 means none.
func NewInformers(c *Clientset, resync time.Duration) *Informers {
	return &Informers{
		PodAutoscalers: NewInformer(c.PodAutoscalers(""), &autoscalingv1alpha1.PodAutoscaler{}, resync),
		Metrics:        NewInformer(c.Metrics(""), &autoscalingv1alpha1.Metric{}, resync),
		Functions:      NewInformer(c.Functions(""), &functionsv1alpha1.Function{}, resync),
		Topics:         NewInformer(c.Topics(""), &functionsv1alpha1.Topic{}, resync),
	}
}

// Listers of tidal's resources.
type (
	PodAutoscalerLister = listers.ResourceIndexer[*autoscalingv1alpha1.PodAutoscaler]
	MetricLister        = listers.ResourceIndexer[*autoscalingv1alpha1.Metric]
	FunctionLister      = listers.ResourceIndexer[*functionsv1alpha1.Function]
	TopicLister         = listers.ResourceIndexer[*functionsv1alpha1.Topic]
)

// NewPodAutoscalerLister lists from inf's cache.
func NewPodAutoscalerLister(inf cache.SharedIndexInformer) PodAutoscalerLister {
	return listers.New[*autoscalingv1alpha1.PodAutoscaler](inf.GetIndexer(), autoscalingv1alpha1.Resource("podautoscalers"))
}

// NewMetricLister lists from inf's cache.
func NewMetricLister(inf cache.SharedIndexInformer) MetricLister {
	return listers.New[*autoscalingv1alpha1.Metric](inf.GetIndexer(), autoscalingv1alpha1.Resource("metrics"))
}

// NewFunctionLister lists from inf's cache.
func NewFunctionLister(inf cache.SharedIndexInformer) FunctionLister {
	return listers.New[*functionsv1alpha1.Function](inf.GetIndexer(), functionsv1alpha1.Resource("functions"))
}

// NewTopicLister lists from inf's cache.
func NewTopicLister(inf cache.SharedIndexInformer) TopicLister {
	return listers.New[*functionsv1alpha1.Topic](inf.GetIndexer(), functionsv1alpha1.Resource("topics"))
}
