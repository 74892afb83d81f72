package main

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/deployer"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	functionslisters "github.com/tidalscale/tidal/apis/generated/listers/functions/v1alpha1"
	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/kubecache"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/targetkey"
)

// indexManaged indexes tidal's PodAutoscalers by the key of the target
// they scale, for access; the PodAutoscaler controller keeps an index of
// its own.
const indexManaged = "tidal.dev/managed-target"

// access is what the actuator may act on, answered from its informer
// caches, never a live read: a caller holding a decider's or an
// operator's certificate reaches no workload tidal does not manage. Scale
// and GetScale reach a target a tidal PodAutoscaler, a Function or (in
// Knative mode) a Knative PodAutoscaler names; Deploy, Update and Undeploy
// write only functions' Deployments (isFunctionDeployment), never a
// Deployment of the same name that is someone else's; all in the
// namespaces the actuator watches. KEDA's targets are never the actuator's: KEDA scales
// them, and deciders hold them as advisory, sending no Scale.
type access struct {
	namespaces  kubecache.Namespaces
	pas         cache.Indexer
	functions   functionslisters.FunctionLister
	deployments appslisters.DeploymentLister
	// knative says whether a Knative PodAutoscaler names a target; nil
	// outside Knative mode.
	knative interface {
		Handles(scale.Target) (bool, error)
	}
	synced []cache.InformerSynced
	// caches says whether GetScale reads a target's kind from a cache.
	caches func(scale.Target) bool
	// liveReads bounds GetScale's live reads of kinds not cached, for
	// all callers; liveShares, when not nil, first bounds each caller's
	// about one namespace, so one tenant cannot spend the others' reads.
	liveReads  *rate.Limiter
	liveShares *server.KeyedLimiter
}

// managedTargetIndex keys a PodAutoscaler by its target's key.
func managedTargetIndex(obj any) ([]string, error) {
	pa, ok := obj.(*autoscalingv1alpha1.PodAutoscaler)
	if !ok {
		return nil, nil
	}
	r := pa.Spec.ScaleTargetRef
	return []string{targetkey.Of(pa.Namespace, r.Name, r.APIVersion, r.Kind)}, nil
}

// Refusals name the rule the caller broke.
func errNotWatched(what, ns string) error {
	return status.Errorf(codes.PermissionDenied, "%s: namespace %q is not one this actuator watches (--namespaces)", what, commonv1.Prefix(ns))
}

var errCachesNotSynced = status.Error(codes.Unavailable, "the actuator's caches are not synced yet; retry")

func (a *access) hasSynced() bool {
	return !slices.ContainsFunc(a.synced, func(s cache.InformerSynced) bool { return !s() })
}

// scalable refuses a target tidal does not manage with PERMISSION_DENIED
// naming the rule.
func (a *access) scalable(ref *commonv1.TargetRef) error {
	t := targetOf(ref)
	what := "target " + ref.Key()
	if !a.namespaces.Watches(t.Namespace) {
		return errNotWatched(what, t.Namespace)
	}
	if !a.hasSynced() {
		return errCachesNotSynced
	}
	objs, err := a.pas.ByIndex(indexManaged, targetkey.Of(t.Namespace, t.Name, t.APIVersion, t.Kind))
	if err != nil {
		return status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	if len(objs) > 0 {
		return nil
	}
	if group, kind := targetkey.GroupKind(t.APIVersion, t.Kind); group == "apps" && kind == "Deployment" {
		if _, err := a.functions.Functions(t.Namespace).Get(t.Name); err == nil {
			return nil
		}
	}
	if a.knative != nil {
		ok, err := a.knative.Handles(t)
		if err != nil {
			return status.Errorf(codes.Unavailable, "%s: %v", what, err)
		}
		if ok {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s: no PodAutoscaler, Function or Knative PodAutoscaler names it; the actuator scales only what tidal manages", what)
}

// isFunctionDeployment reports whether dep is a function's: a Function
// controls it, or the Deployer made it (its managed-by and function
// labels, which only who may write the Deployment can set).
func isFunctionDeployment(dep *appsv1.Deployment) bool {
	if c := metav1.GetControllerOf(dep); c != nil && c.Kind == "Function" && c.APIVersion == functionsv1alpha1.SchemeGroupVersion.String() {
		return true
	}
	return dep.Labels[deployer.LabelManagedBy] == deployer.ManagedBy && dep.Labels[deployer.LabelFunction] == dep.Name
}

// function checks that method may write the function namespace/name's
// Deployment: the namespace is watched, and a Deployment of that name, if
// the cache holds one, is a function's. It returns the Function object of
// that name (nil when none: riff's Deploy needs none; its Deployment is
// then owned by nothing) and whether the Deployment exists.
func (a *access) function(method, namespace, name string) (*functionsv1alpha1.Function, bool, error) {
	what := fmt.Sprintf("%s of function %s/%s", method, commonv1.Prefix(namespace), commonv1.Prefix(name))
	if !a.namespaces.Watches(namespace) {
		return nil, false, errNotWatched(what, namespace)
	}
	if !a.hasSynced() {
		return nil, false, errCachesNotSynced
	}
	var exists bool
	dep, err := a.deployments.Deployments(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, false, status.Errorf(codes.Internal, "%s: %v", what, err)
	case !isFunctionDeployment(dep):
		return nil, false, status.Errorf(codes.PermissionDenied, "%s: deployment %s/%s is not a function's (no Function controls it, it has no %s=%s label); Deploy, Update and Undeploy write only functions' Deployments",
			what, dep.Namespace, dep.Name, deployer.LabelManagedBy, deployer.ManagedBy)
	default:
		exists = true
	}
	fn, err := a.functions.Functions(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, exists, nil
	case err != nil:
		return nil, exists, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	return fn, exists, nil
}

// liveRead takes a token for a live GetScale read of a kind not cached:
// from the caller's share for the target's namespace first, so a caller
// over its share spends none of the reads left to the others.
func (a *access) liveRead(ctx context.Context, ref *commonv1.TargetRef) error {
	if a.liveShares != nil && !a.liveShares.Allow(server.CallerKey(ctx, ref.GetNamespace())) {
		return status.Errorf(codes.ResourceExhausted, "GetScale of %s: its kind is not cached and is read live, at most %g times a second by caller %s about namespace %q (--live-read-namespace-rate); retry later",
			ref.Key(), a.liveShares.Rate(), identity.Quote(server.Caller(ctx)), commonv1.Prefix(ref.GetNamespace()))
	}
	if a.liveReads.Allow() {
		return nil
	}
	return status.Errorf(codes.ResourceExhausted, "GetScale of %s: its kind is not cached and is read live, at most %g times a second for all callers (--live-read-rate); retry later", ref.Key(), float64(a.liveReads.Limit()))
}
