package kubecache_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/kubecache"
	"github.com/tidalscale/tidal/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// TestNamespacedInformers: informers over two of three namespaces, made
// with a ServiceAccount whose only rights are Roles in those two, see every
// object there and nothing of the third; handlers, indexers and listers
// behave as a single informer's.
func TestNamespacedInformers(t *testing.T) {
	c := cluster.Shared(t)
	a, b, other := c.Namespace(t), c.Namespace(t), c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{a, b} {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "watch"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"autoscaling.tidal.dev"}, Resources: []string{"podautoscalers"}, Verbs: []string{"list", "watch"}},
		}}
		if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "watch"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "watch"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: a, Name: "default"}}}
		if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := c.ServiceAccountConfig(ctx, a, "default")
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	tidal := tidalclient.NewForConfigOrDie(cfg)
	admin := tidalclient.NewForConfigOrDie(c.Config())
	for _, d := range []struct{ ns, name string }{{a, "one"}, {b, "two"}, {other, "three"}} {
		if _, err := c.Client.AppsV1().Deployments(d.ns).Create(ctx, cluster.Deployment(d.name, map[string]string{"app": "web"}, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pa := &autoscalingv1alpha1.PodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "pa"}, Spec: autoscalingv1alpha1.PodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "two"},
	}}
	for _, ns := range []string{b, other} {
		if _, err := admin.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	watched := []string{a, b}
	kf := kubecache.NewKubeInformers(kube, 0, watched, informers.WithTransform(kubecache.DropManagedFields))
	deps := kf.Apps().V1().Deployments()
	if err := deps.Informer().AddIndexers(cache.Indexers{"app": func(obj any) ([]string, error) {
		return []string{obj.(*appsv1.Deployment).Labels["app"]}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	// Every event per key: a controller may update a new Deployment's
	// status right after its add, so the last event alone is no proof.
	seen := map[string]map[string]bool{}
	record := func(ev string) func(any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			key, _ := cache.MetaNamespaceKeyFunc(obj)
			mu.Lock()
			if seen[key] == nil {
				seen[key] = map[string]bool{}
			}
			seen[key][ev] = true
			mu.Unlock()
		}
	}
	reg, err := deps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: record("add"), UpdateFunc: func(_, n any) { record("update")(n) }, DeleteFunc: record("delete"),
	})
	if err != nil {
		t.Fatal(err)
	}
	tf := kubecache.NewTidalInformers(tidal, 0, watched)
	pas := tf.Autoscaling().V1alpha1().PodAutoscalers()
	_ = pas.Informer()
	kf.StartWithContext(ctx)
	tf.StartWithContext(ctx)
	// Shutdown waits for the informers, which stop only when ctx ends.
	defer tf.Shutdown()
	defer kf.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), deps.Informer().HasSynced, reg.HasSynced, pas.Informer().HasSynced) {
		t.Fatal("caches never synced (a cluster-wide list would be forbidden)")
	}
	for typ, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Errorf("WaitForCacheSync: %v not synced", typ)
		}
	}

	list, err := deps.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range list {
		names = append(names, d.Namespace+"/"+d.Name)
	}
	slices.Sort(names)
	if want := sorted(a+"/one", b+"/two"); !slices.Equal(names, want) {
		t.Errorf("listed %v, want %v", names, want)
	}
	if _, err := deps.Lister().Deployments(b).Get("two"); err != nil {
		t.Errorf("Get %s/two: %v", b, err)
	}
	if _, err := deps.Lister().Deployments(other).Get("three"); !apierrors.IsNotFound(err) {
		t.Errorf("Get of the unwatched %s/three: %v, want NotFound", other, err)
	}
	if got, _ := deps.Lister().Deployments(a).List(labels.Everything()); len(got) != 1 || got[0].Name != "one" {
		t.Errorf("namespace %s lists %d deployments, want one", a, len(got))
	}
	if got, err := deps.Informer().GetIndexer().ByIndex("app", "web"); err != nil || len(got) != 2 {
		t.Errorf("ByIndex(app, web): %d objects, %v; want the two watched", len(got), err)
	}
	if got, err := pas.Lister().List(labels.Everything()); err != nil || len(got) != 1 || got[0].Namespace != b {
		t.Errorf("PodAutoscalers listed: %v, %v; want %s's alone", got, err, b)
	}

	// Events of both namespaces reach the one handler; the third's never.
	if err := c.Client.AppsV1().Deployments(a).Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(other).Create(ctx, cluster.Deployment("four", nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(b).Create(ctx, cluster.Deployment("five", nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return seen[a+"/one"]["delete"] && seen[b+"/five"]["add"], nil
	})
	if err != nil {
		t.Fatalf("events seen %v: %v", seen, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for key := range seen {
		if ns, _, _ := cache.SplitMetaNamespaceKey(key); ns == other {
			t.Errorf("an event of the unwatched namespace reached the handler: %s", key)
		}
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }
