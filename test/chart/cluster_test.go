package chart_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// install applies a release's objects as `helm install` does (see
// release.Install) and deletes, when t ends, what its namespace's deletion
// would leave: cluster-scoped objects and those in other namespaces (Knative
// mode's autoscaler Service, which a later install or dry run of Knative mode
// would otherwise find owned by no release of its own).
func install(t *testing.T, c *cluster.Cluster, r release, dryRun bool) (manifest, map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	objs, clusterScoped, notServed, err := rel.Install(ctx, c.Config(), r.opts(), dryRun)
	t.Cleanup(func() {
		a := newApplier(t, c)
		for _, o := range objs {
			if ns := o.GetNamespace(); ns != "" && ns != r.namespace {
				clusterScoped = append(clusterScoped, o)
			}
		}
		for _, o := range clusterScoped {
			if err := a.Delete(context.Background(), o); err != nil {
				t.Logf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs, notServed
}

func newApplier(t testing.TB, c *cluster.Cluster) *rel.Applier {
	t.Helper()
	a, err := rel.NewApplier(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestInstall applies every rendering of the chart to a real API server
// (server-side apply, strict field validation): the defaults and the
// everything-off set for real, the all-options set for real too, in
// namespaces of their own. The Deployments of the default set and of
// Knative mode must then roll out: their pods pass admission and become
// Ready (kwok runs them).
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
			// Knative's autoscaler Service lives in Knative's namespace.
			if sc.knativeNS != "" {
				ensureNamespace(t, c, sc.knativeNS)
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
			// The defaults roll out, and so does Knative mode (the
			// collector's pods with their activator port).
			if sc.name != "defaults" && sc.knativeNS == "" {
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
	if err := newApplier(t, c).Apply(context.Background(), ns, false); err != nil {
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
	err := newApplier(t, c).Apply(context.Background(), dep, true)
	if err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Fatalf("applying a Deployment with spec.replicaz: err = %v, want a strict-validation error naming the field", err)
	}
}
