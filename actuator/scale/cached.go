package scale

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/tidalscale/tidal/actuator/overlay"
)

var (
	deploymentsResource  = schema.GroupResource{Group: "apps", Resource: "deployments"}
	statefulSetsResource = schema.GroupResource{Group: "apps", Resource: "statefulsets"}
)

// Cached is a Kube scaler that reads Deployments, by far the most common
// target, from an informer's cache instead of the API server, and writes
// them with one patch. Other kinds are read and written live, except that
// reads marked CacheOnly find StatefulSets in a cache too (CacheStatefulSets).
// Its own writes of Deployments are visible to its reads at once, before the
// cache catches up.
type Cached struct {
	*Kube
	deployments appslisters.DeploymentLister
	// statefulSets is nil unless CacheStatefulSets.
	statefulSets appslisters.StatefulSetLister
	// written holds the replicas this process patched into Deployments the
	// cache has not caught up with, keyed by namespace/name.
	written *overlay.Overlay[cache.ObjectName, int32]
}

// NewCached returns a Cached scaler over k reading Deployments from inf,
// which the caller starts.
func NewCached(k *Kube, inf appsinformers.DeploymentInformer) (*Cached, error) {
	c := &Cached{Kube: k, deployments: inf.Lister(), written: overlay.New[cache.ObjectName, int32]()}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			c.written.Delete(cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()})
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("deployment informer: %w", err)
	}
	return c, nil
}

// CacheStatefulSets makes reads marked CacheOnly answer StatefulSets from
// inf, which the caller starts. Their cached copies keep only what their
// scale reports (TrimStatefulSet): a StatefulSet's pod and volume claim
// templates are most of its size. The scaler's own reads and writes of
// StatefulSets stay live (a write reads first and retries on conflict).
func (c *Cached) CacheStatefulSets(inf appsinformers.StatefulSetInformer) error {
	if err := inf.Informer().SetTransform(TrimStatefulSet); err != nil {
		return fmt.Errorf("statefulset informer: %w", err)
	}
	c.statefulSets = inf.Lister()
	return nil
}

// Caches reports whether reads of t marked CacheOnly are answered from a
// cache; others go to the API server.
func (c *Cached) Caches(t Target) bool {
	return isDeployment(t) || (c.statefulSets != nil && isStatefulSet(t))
}

// TrimStatefulSet is an informer transform that keeps only what a
// StatefulSet's scale subresource reports: identity, spec.replicas, the
// selector and status.replicas. A tombstone passes as it is.
func TrimStatefulSet(obj any) (any, error) {
	s, ok := obj.(*appsv1.StatefulSet)
	if !ok {
		return obj, nil
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion},
		Spec:       appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, Selector: s.Spec.Selector},
		Status:     appsv1.StatefulSetStatus{Replicas: s.Status.Replicas},
	}, nil
}

// isDeployment reports whether t is an apps/v1 Deployment.
func isDeployment(t Target) bool {
	return (t.APIVersion == "" || t.APIVersion == "apps/v1") && (t.Kind == "" || t.Kind == "Deployment")
}

// isStatefulSet reports whether t is an apps/v1 StatefulSet.
func isStatefulSet(t Target) bool {
	return t.APIVersion == "apps/v1" && t.Kind == "StatefulSet"
}

// fromCache returns t's scale from the cache of its kind: a Deployment's,
// with this process's writes the cache has not caught up with, or with
// statefulSets a StatefulSet's (never written from the cache). cached is
// false for a kind no cache holds; ok is false when the cache does not
// hold t (created a moment ago, or deleted).
func (c *Cached) fromCache(t Target, statefulSets bool) (s Scale, cached, ok bool, err error) {
	switch {
	case isDeployment(t):
		var d *appsv1.Deployment
		if d, err = c.deployments.Deployments(t.Namespace).Get(t.Name); err == nil {
			s = Scale{Resource: deploymentsResource, Replicas: ptr.Deref(d.Spec.Replicas, 1), StatusReplicas: d.Status.Replicas}
			if n, ok := c.written.Newer(cache.ObjectName{Namespace: t.Namespace, Name: t.Name}, d.ResourceVersion); ok {
				s.Replicas = n
			}
			s.Selector, err = selectorOf(t, d.Spec.Selector)
		}
	case statefulSets && c.statefulSets != nil && isStatefulSet(t):
		var st *appsv1.StatefulSet
		if st, err = c.statefulSets.StatefulSets(t.Namespace).Get(t.Name); err == nil {
			s = Scale{Resource: statefulSetsResource, Replicas: ptr.Deref(st.Spec.Replicas, 1), StatusReplicas: st.Status.Replicas}
			s.Selector, err = selectorOf(t, st.Spec.Selector)
		}
	default:
		return Scale{}, false, false, nil
	}
	switch {
	case apierrors.IsNotFound(err):
		return Scale{}, true, false, nil
	case err != nil:
		return Scale{}, true, false, err
	}
	return s, true, true, nil
}

// selectorOf is t's selector as its scale subresource reports it
// (status.selector).
func selectorOf(t Target, ls *metav1.LabelSelector) (string, error) {
	if ls == nil {
		return "", nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "", fmt.Errorf("target %s: selector: %w", t, err)
	}
	return sel.String(), nil
}

// CachedReplicas is t's spec.replicas when a cache holds t (a Deployment,
// or a StatefulSet with CacheStatefulSets), without an API request; ok is
// false otherwise.
func (c *Cached) CachedReplicas(t Target) (replicas int32, ok bool) {
	s, _, ok, _ := c.fromCache(t, true) // the zero Scale unless ok
	return s.Replicas, ok
}

// cacheOnlyKey marks a context whose reads the cache alone answers.
type cacheOnlyKey struct{}

// CacheOnly marks ctx's reads of the kinds the scaler caches (Caches) as
// answered from the cache alone: a Deployment or StatefulSet the cache does
// not hold is not found rather than read live. Callers who may be anyone
// (GetScale) read this way, so no loop of theirs spends the API budget
// writes need.
func CacheOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, cacheOnlyKey{}, true)
}

// GetScale reads t's scale, from the cache for a cached Deployment, and
// for a StatefulSet when ctx is CacheOnly.
func (c *Cached) GetScale(ctx context.Context, t Target) (Scale, error) {
	cacheOnly := ctx.Value(cacheOnlyKey{}) != nil
	s, cached, ok, err := c.fromCache(t, cacheOnly)
	if err != nil || ok {
		return s, err
	}
	if cached && cacheOnly {
		kind := "deployment"
		if !isDeployment(t) {
			kind = "statefulset"
		}
		return Scale{}, fmt.Errorf("%s %s: not in the actuator's cache: %w", kind, t, ErrNotFound)
	}
	return c.Kube.GetScale(ctx, t)
}

// GetReplicas implements Scaler.
func (c *Cached) GetReplicas(ctx context.Context, t Target) (int32, error) {
	s, err := c.GetScale(ctx, t)
	return s.Replicas, err
}

// SetReplicas implements Scaler. For a cached Deployment it writes nothing
// when the value is already there and otherwise patches once.
func (c *Cached) SetReplicas(ctx context.Context, t Target, replicas int32) error {
	if !isDeployment(t) {
		return c.Kube.SetReplicas(ctx, t, replicas)
	}
	s, _, ok, err := c.fromCache(t, false)
	if err != nil {
		return err
	}
	if ok && s.Replicas == replicas {
		return nil
	}
	rv, err := c.PatchReplicas(ctx, t, replicas)
	if err != nil {
		return err
	}
	c.written.Put(cache.ObjectName{Namespace: t.Namespace, Name: t.Name}, rv, replicas)
	return nil
}
