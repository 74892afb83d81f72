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

	"github.com/tidalscale/tidal/actuator/overlay"
)

var deploymentsResource = schema.GroupResource{Group: "apps", Resource: "deployments"}

// Cached is a Kube scaler that reads Deployments, by far the most common
// target, from an informer's cache instead of the API server, and writes
// them with one patch. Other kinds are read and written live. Its own writes
// are visible to its reads at once, before the cache catches up.
type Cached struct {
	*Kube
	deployments appslisters.DeploymentLister
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

// isDeployment reports whether t is an apps/v1 Deployment.
func isDeployment(t Target) bool {
	return (t.APIVersion == "" || t.APIVersion == "apps/v1") && (t.Kind == "" || t.Kind == "Deployment")
}

// cachedDeployment returns t's scale from the cache; ok is false when the
// cache does not hold it (a Deployment created a moment ago, or deleted).
func (c *Cached) cachedDeployment(t Target) (Scale, bool, error) {
	d, err := c.deployments.Deployments(t.Namespace).Get(t.Name)
	if apierrors.IsNotFound(err) {
		return Scale{}, false, nil
	}
	if err != nil {
		return Scale{}, false, err
	}
	s := Scale{Resource: deploymentsResource, Replicas: 1, StatusReplicas: d.Status.Replicas}
	if d.Spec.Replicas != nil {
		s.Replicas = *d.Spec.Replicas
	}
	if n, ok := c.written.Newer(cache.ObjectName{Namespace: t.Namespace, Name: t.Name}, d.ResourceVersion); ok {
		s.Replicas = n
	}
	if s.Selector, err = selectorOf(d); err != nil {
		return Scale{}, false, fmt.Errorf("target %s: %w", t, err)
	}
	return s, true, nil
}

// selectorOf is the Deployment's selector as its scale subresource
// reports it (status.selector).
func selectorOf(d *appsv1.Deployment) (string, error) {
	if d.Spec.Selector == nil {
		return "", nil
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return "", fmt.Errorf("selector: %w", err)
	}
	return sel.String(), nil
}

// cacheOnlyKey marks a context whose reads the cache alone answers.
type cacheOnlyKey struct{}

// CacheOnly marks ctx's reads as answered from the cache alone: a
// Deployment the cache does not hold is not found rather than read live.
// Callers who may be anyone (GetScale) read this way, so no loop of theirs
// spends the API budget writes need.
func CacheOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, cacheOnlyKey{}, true)
}

// GetScale reads t's scale, from the cache for a cached Deployment.
func (c *Cached) GetScale(ctx context.Context, t Target) (Scale, error) {
	if isDeployment(t) {
		s, ok, err := c.cachedDeployment(t)
		if err != nil || ok {
			return s, err
		}
		if ctx.Value(cacheOnlyKey{}) != nil {
			return Scale{}, fmt.Errorf("deployment %s: not in the actuator's cache: %w", t, ErrNotFound)
		}
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
	s, ok, err := c.cachedDeployment(t)
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
