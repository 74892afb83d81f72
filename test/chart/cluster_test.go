package chart_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/tidalscale/tidal/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// fieldManager is the server-side-apply manager of everything these tests
// install, as `helm install` would.
const fieldManager = "tidal-chart-test"

// applier server-side applies rendered objects with strict field validation,
// so an unknown or misplaced field in a template is an error, as it is for
// `kubectl apply --server-side`.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

func newApplier(t testing.TB, c *cluster.Cluster) *applier {
	t.Helper()
	cfg := c.Config()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// errNotServed marks an object whose kind the cluster does not serve.
type errNotServed struct{ kind string }

func (e errNotServed) Error() string { return e.kind + " is not served by this cluster" }

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, errNotServed{kind: gvk.String()}
	}
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(mapping.Resource), nil
}

// apply applies o; dryRun leaves the cluster unchanged but runs validation
// and admission in full.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	res, err := a.resource(o)
	if err != nil {
		return err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := res.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

func (a *applier) delete(ctx context.Context, o *unstructured.Unstructured) error {
	res, err := a.resource(o)
	if err != nil {
		return err
	}
	err = res.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// install applies a release's objects as `helm install` does: CRDs, then
// everything else. It returns the objects and the kinds the cluster does not
// serve (they are left out). Cluster-scoped objects are deleted when t ends;
// namespaced ones go with their namespace.
func install(t *testing.T, c *cluster.Cluster, r release, dryRun bool) (manifest, map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.includeCRDs = true
	objs := manifest(render(t, r))
	a := newApplier(t, c)
	notServed := map[string]bool{}
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, o := range append(crds, rest...) {
		err := a.apply(ctx, o, dryRun)
		var ns errNotServed
		switch {
		case err == nil:
		case errors.As(err, &ns):
			notServed[o.GetKind()] = true
			continue
		default:
			t.Fatal(err)
		}
		if o.GetNamespace() == "" && o.GetKind() != "CustomResourceDefinition" && !dryRun {
			t.Cleanup(func() {
				if err := a.delete(context.Background(), o); err != nil {
					t.Logf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			})
		}
	}
	return objs, notServed
}

// TestInstall applies every rendering of the chart to a real API server
// (server-side apply, strict field validation): the defaults and the
// everything-off set for real, the all-options set for real too, in
// namespaces of their own. The Deployments of the default set must then
// roll out: their pods pass admission and become Ready (kwok runs them).
func TestInstall(t *testing.T) {
	c := cluster.Shared(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ns := c.Namespace(t)
			r := sc.release
			r.namespace = ns
			r.name = sc.release.name + "-" + ns[strings.LastIndex(ns, "-")+1:]
			// Broker Secrets' Roles live in the namespaces they name.
			for _, extra := range []string{"team-a", "team-b"} {
				if sc.name == "all options" {
					ensureNamespace(t, c, extra)
				}
			}
			objs, notServed := install(t, c, r, false)
			for kind := range notServed {
				if kind != "ServiceMonitor" {
					t.Errorf("the cluster does not serve %s", kind)
				}
			}
			if got := notServed["ServiceMonitor"]; got != sc.serviceMonitor {
				t.Errorf("ServiceMonitor left out = %v, want %v (the test cluster has no Prometheus Operator)", got, sc.serviceMonitor)
			}
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			if sc.name != "defaults" {
				return
			}
			waitRollout(t, c, ns, objs)
		})
	}
}

func ensureNamespace(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	if err := newApplier(t, c).apply(context.Background(), ns, false); err != nil {
		t.Fatal(err)
	}
}

// waitRollout waits until every rendered Deployment has all its replicas
// Ready.
func waitRollout(t *testing.T, c *cluster.Cluster, ns string, objs manifest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, o := range objs.ofKind("Deployment") {
		var last *appsv1.Deployment
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = d
			return d.Spec.Replicas != nil && d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.ObservedGeneration == d.Generation, nil
		})
		if err != nil {
			t.Fatalf("Deployment %s not rolled out: %v; status %+v", o.GetName(), err, last.Status)
		}
	}
}

// TestInstallRefusesTypos proves the install check can fail: a field the
// API does not know is refused, not dropped.
func TestInstallRefusesTypos(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	objs := manifest(render(t, release{name: "typo", namespace: ns}))
	dep := objs.get(t, "Deployment", "typo-tidal-decider").DeepCopy()
	if err := unstructured.SetNestedField(dep.Object, int64(2), "spec", "replicaz"); err != nil {
		t.Fatal(err)
	}
	err := newApplier(t, c).apply(context.Background(), dep, true)
	if err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Fatalf("applying a Deployment with spec.replicaz: err = %v, want a strict-validation error naming the field", err)
	}
}
