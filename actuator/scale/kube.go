package scale

import (
	"context"
	"errors"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/client-go/util/retry"
)

// ErrNoScaleSubresource is returned for a target whose resource has no
// scale subresource: it cannot be scaled by anyone.
var ErrNoScaleSubresource = errors.New("resource has no scale subresource")

// FieldManager is the field manager of every write tidal's actuator makes.
const FieldManager = "tidal-actuator"

// Scale is a target's scale subresource, as the API server reports it.
type Scale struct {
	// Resource is the target's group and resource, resolved from its kind.
	Resource schema.GroupResource
	// Replicas is spec.replicas: what the target is asked to run.
	Replicas int32
	// StatusReplicas is status.replicas: what it runs now.
	StatusReplicas int32
	// Selector is status.selector, the label selector of the target's pods
	// in its string form; empty when the resource does not report one.
	Selector string
}

// Kube is a Scaler that reads and writes any target with a scale
// subresource (Deployment, StatefulSet, ReplicaSet, or a custom resource
// that declares /scale). Kinds are resolved to resources through discovery,
// so a CRD installed after start-up is found on first use.
type Kube struct {
	mapper meta.ResettableRESTMapper
	kinds  scaleclient.ScaleKindResolver
	scales scaleclient.ScalesGetter

	// beforeUpdate, when set, runs between the read and the write of
	// SetReplicas; tests use it to provoke a write conflict.
	beforeUpdate func()
}

// NewKube returns a Kube scaler using cfg.
func NewKube(cfg *rest.Config) (*Kube, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	kinds := scaleclient.NewDiscoveryScaleKindResolver(cached)
	scales, err := scaleclient.NewForConfig(rest.CopyConfig(cfg), mapper, dynamic.LegacyAPIPathResolverFunc, kinds)
	if err != nil {
		return nil, fmt.Errorf("scale client: %w", err)
	}
	return &Kube{mapper: mapper, kinds: kinds, scales: scales}, nil
}

// GroupVersionKind returns the target's kind, with apps/v1 Deployment for
// the empty parts.
func (t Target) GroupVersionKind() (schema.GroupVersionKind, error) {
	av, kind := t.APIVersion, t.Kind
	if av == "" {
		av = "apps/v1"
	}
	if kind == "" {
		kind = "Deployment"
	}
	gv, err := schema.ParseGroupVersion(av)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("target %s: api version %q: %w", t, av, err)
	}
	return gv.WithKind(kind), nil
}

// resource resolves t's kind to a resource that has a scale subresource.
func (k *Kube) resource(t Target) (schema.GroupResource, error) {
	gvk, err := t.GroupVersionKind()
	if err != nil {
		return schema.GroupResource{}, err
	}
	mapping, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// The kind may have been installed since discovery was cached.
		k.mapper.Reset()
		mapping, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return schema.GroupResource{}, fmt.Errorf("target %s: kind %s is not served by the API: %w", t, gvk, ErrNotFound)
	}
	if err != nil {
		return schema.GroupResource{}, fmt.Errorf("target %s: resolve kind %s: %w", t, gvk, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return schema.GroupResource{}, fmt.Errorf("target %s: %s is cluster-scoped: %w", t, gvk, ErrNoScaleSubresource)
	}
	if _, err := k.kinds.ScaleForResource(mapping.Resource); err != nil {
		return schema.GroupResource{}, fmt.Errorf("target %s (%s): %w", t, mapping.Resource.GroupResource(), ErrNoScaleSubresource)
	}
	return mapping.Resource.GroupResource(), nil
}

// GetScale reads t's scale subresource.
func (k *Kube) GetScale(ctx context.Context, t Target) (Scale, error) {
	gr, err := k.resource(t)
	if err != nil {
		return Scale{}, err
	}
	s, err := k.get(ctx, t, gr)
	if err != nil {
		return Scale{}, err
	}
	return Scale{Resource: gr, Replicas: s.Spec.Replicas, StatusReplicas: s.Status.Replicas, Selector: s.Status.Selector}, nil
}

func (k *Kube) get(ctx context.Context, t Target, gr schema.GroupResource) (*autoscalingv1.Scale, error) {
	s, err := k.scales.Scales(t.Namespace).Get(ctx, gr, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %s: %w", gr, t, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get scale of %s %s: %w", gr, t, err)
	}
	return s, nil
}

// GetReplicas implements Scaler: it returns spec.replicas.
func (k *Kube) GetReplicas(ctx context.Context, t Target) (int32, error) {
	s, err := k.GetScale(ctx, t)
	return s.Replicas, err
}

// PatchReplicas sets t's spec.replicas with one merge patch of its scale
// subresource, without reading it first, and returns the resourceVersion
// the target has after the write. It is for callers that already know the
// current value (from a cache) and order their own writes.
func (k *Kube) PatchReplicas(ctx context.Context, t Target, replicas int32) (string, error) {
	gvk, err := t.GroupVersionKind()
	if err != nil {
		return "", err
	}
	gr, err := k.resource(t)
	if err != nil {
		return "", err
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	s, err := k.scales.Scales(t.Namespace).Patch(ctx, gr.WithVersion(gvk.Version), t.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%s %s: %w", gr, t, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("scale %s %s to %d: %w", gr, t, replicas, err)
	}
	return s.ResourceVersion, nil
}

// SetReplicas implements Scaler. It reads the scale and writes it back with
// the read's resourceVersion, so a concurrent writer makes it read again and
// retry (with client-go's backoff for a resource under active management)
// instead of being overwritten blindly. Writing the value the target
// already has sends nothing.
func (k *Kube) SetReplicas(ctx context.Context, t Target, replicas int32) error {
	gr, err := k.resource(t)
	if err != nil {
		return err
	}
	// DefaultBackoff, not DefaultRetry: the target's own controller writes
	// its status several times around a change of scale.
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		s, err := k.get(ctx, t, gr)
		if err != nil {
			return err
		}
		if s.Spec.Replicas == replicas {
			return nil
		}
		if k.beforeUpdate != nil {
			k.beforeUpdate()
		}
		s.Spec.Replicas = replicas
		_, err = k.scales.Scales(t.Namespace).Update(ctx, gr, s, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s: %w", gr, t, ErrNotFound)
		}
		return err
	})
}
