package scale

import (
	"context"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestCachedStatefulSets: a CacheOnly read of a StatefulSet answers from the
// trimmed cache what the live scale subresource says; a StatefulSet the
// cache does not hold is not found; reads not marked CacheOnly stay live.
func TestCachedStatefulSets(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, err := NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	inf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	cached, err := NewCached(live, inf.Apps().V1().Deployments())
	if err != nil {
		t.Fatal(err)
	}
	sts := inf.Apps().V1().StatefulSets()
	if err := cached.CacheStatefulSets(sts); err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	defer inf.Shutdown()
	defer cancel()

	four := int32(4)
	obj := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &four, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: cluster.Deployment("db", nil, 1).Spec.Template},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	db := Target{Namespace: ns, Name: "db", APIVersion: "apps/v1", Kind: "StatefulSet"}
	if !cached.Caches(db) || cached.Caches(Target{Namespace: ns, Name: "db", APIVersion: "apps/v1", Kind: "ReplicaSet"}) {
		t.Fatalf("Caches: want StatefulSets and Deployments cached, ReplicaSets not")
	}
	// The controller moves status.replicas; the cache must agree with the
	// live scale once both settle.
	var got, want Scale
	testkit.Eventually(t, 20*time.Second, "the cached scale of the StatefulSet to match the live one", func() bool {
		want, err = live.GetScale(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		got, err = cached.GetScale(CacheOnly(ctx), db)
		return err == nil && got == want && want.StatusReplicas == 4
	})
	if got.Replicas != 4 || got.Selector != "app=db" || got.Resource != statefulSetsResource {
		t.Errorf("cached scale = %+v, want 4 replicas, selector app=db, resource statefulsets", got)
	}
	// The write budget's class of a decision reads replicas the same way.
	if r, ok := cached.CachedReplicas(db); !ok || r != 4 {
		t.Errorf("CachedReplicas = %d, %v; want 4, true", r, ok)
	}
	if _, ok := cached.CachedReplicas(Target{Namespace: ns, Name: "db", APIVersion: "apps/v1", Kind: "ReplicaSet"}); ok {
		t.Error("CachedReplicas of a kind no cache holds: ok")
	}
	held, exists, err := sts.Informer().GetIndexer().GetByKey(ns + "/db")
	if err != nil || !exists {
		t.Fatalf("the cache does not hold the StatefulSet: %v", err)
	}
	if s := held.(*appsv1.StatefulSet); len(s.Spec.Template.Spec.Containers) != 0 || s.ManagedFields != nil {
		t.Errorf("cached StatefulSet keeps its pod template (%d containers) or managed fields (%d)", len(s.Spec.Template.Spec.Containers), len(s.ManagedFields))
	}

	// A scale the cache has not seen yet is not read live under CacheOnly.
	missing := Target{Namespace: ns, Name: "ghost", APIVersion: "apps/v1", Kind: "StatefulSet"}
	if _, ok := cached.CachedReplicas(missing); ok {
		t.Error("CachedReplicas of a StatefulSet the cache lacks: ok")
	}
	if _, err := cached.GetScale(CacheOnly(ctx), missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("CacheOnly GetScale of a missing StatefulSet: %v, want ErrNotFound", err)
	}
	// Without CacheOnly the read is live: a write is seen at once.
	if err := cached.SetReplicas(ctx, db, 2); err != nil {
		t.Fatal(err)
	}
	if s, err := cached.GetScale(ctx, db); err != nil || s.Replicas != 2 {
		t.Errorf("live GetScale after SetReplicas(2) = %+v, %v; want 2 replicas", s, err)
	}
	testkit.Eventually(t, 20*time.Second, "the cache to follow the write", func() bool {
		s, err := cached.GetScale(CacheOnly(ctx), db)
		return err == nil && s.Replicas == 2
	})
}
