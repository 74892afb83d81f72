package pods

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

func pod(ns, name string, ready bool, ls map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: ls},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: st}, {Type: corev1.PodReady, Status: st},
		}},
	}
}

func TestListAndCountReady(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, IndexLabel: labelIndex})
	add := func(p *corev1.Pod) {
		obj, _ := Trim(p) // as the informer keeps it
		_ = idx.Add(obj)
	}
	for i := range 4 {
		add(pod("a", fmt.Sprintf("web-%d", i), i < 3, map[string]string{"app": "web", "tier": fmt.Sprint(i % 2)}))
	}
	add(pod("a", "db-0", true, map[string]string{"app": "db"}))
	add(pod("b", "web-0", true, map[string]string{"app": "web"}))

	tests := []struct {
		sel       string
		ns        string
		wantList  int
		wantReady int32
	}{
		{"app=web", "a", 4, 3},
		{"app=web,tier=0", "a", 2, 2},
		{"app in (web)", "a", 4, 3},
		{"app in (web,db)", "a", 5, 4}, // no single-value anchor: the namespace is scanned
		{"app!=web", "a", 1, 1},
		{"app=web", "b", 1, 1},
		{"app=none", "a", 0, 0},
	}
	for _, tt := range tests {
		sel, err := labels.Parse(tt.sel)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := List(idx, tt.ns, sel)
		if err != nil || len(objs) != tt.wantList {
			t.Errorf("List(%s, %q) = %d objects, %v; want %d", tt.ns, tt.sel, len(objs), err, tt.wantList)
		}
		if n, err := CountReady(idx, tt.ns, sel); err != nil || n != tt.wantReady {
			t.Errorf("CountReady(%s, %q) = %d, %v; want %d", tt.ns, tt.sel, n, err, tt.wantReady)
		}
	}
}

func TestTrimKeepsWhatReadyNeeds(t *testing.T) {
	started := metav1.Now()
	deleting := metav1.Now()
	for _, tt := range []struct {
		name string
		edit func(*corev1.Pod)
	}{
		{"ready", func(*corev1.Pod) {}},
		{"not ready", func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionFalse }},
		{"no IP", func(p *corev1.Pod) { p.Status.PodIP = "" }},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }},
		{"deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &deleting }},
		{"started", func(p *corev1.Pod) { p.Status.StartTime = &started }},
	} {
		p := pod("a", "web-0", true, map[string]string{"app": "web"})
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1"}}
		tt.edit(p)
		out, err := Trim(p)
		if err != nil {
			t.Fatal(err)
		}
		tp := Of(out)
		if tp == nil {
			t.Fatalf("%s: Trim = %T, want a *Pod", tt.name, out)
		}
		want := Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, OwnerReferences: p.OwnerReferences,
			DeletionTimestamp: p.DeletionTimestamp}, Phase: p.Status.Phase, IP: p.Status.PodIP, ReadyCondition: ReadyCondition(p), StartTime: p.Status.StartTime}
		if !equality.Semantic.DeepEqual(*tp, want) || tp.Ready() != Ready(p) {
			t.Errorf("%s: Trim = %+v (ready %v), want %+v (ready %v)", tt.name, *tp, tp.Ready(), want, Ready(p))
		}
		if c := tp.DeepCopyObject().(*Pod); !equality.Semantic.DeepEqual(c, tp) || c == tp {
			t.Errorf("%s: DeepCopyObject = %+v, want an equal copy", tt.name, c)
		}
	}
	if of := Of(cache.DeletedFinalStateUnknown{Key: "a/web-0", Obj: &Pod{}}); of == nil {
		t.Error("Of(tombstone of a Pod) = nil, want the Pod")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "a/x"}
	if out, _ := Trim(tomb); out != any(tomb) {
		t.Errorf("Trim(tombstone) = %v, want it unchanged", out)
	}
}

func TestSelectorsMatching(t *testing.T) {
	s := NewSelectors[string]()
	set := func(k, ns, sel string) {
		parsed, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		s.Set(k, ns, parsed)
	}
	set("web", "a", "app=web")
	set("web-0", "a", "app=web,tier=0")
	set("any", "a", "tier in (0,1)")
	set("other-ns", "b", "app=web")
	set("moved", "a", "app=db")
	set("moved", "a", "app=web") // replaces its old selector
	set("gone", "a", "app=web")
	s.Delete("gone")

	tests := []struct {
		ns     string
		labels map[string]string
		want   []string
	}{
		{"a", map[string]string{"app": "web", "tier": "0"}, []string{"any", "moved", "web", "web-0"}},
		{"a", map[string]string{"app": "web", "tier": "1"}, []string{"any", "moved", "web"}},
		{"a", map[string]string{"app": "db"}, nil},
		{"b", map[string]string{"app": "web"}, []string{"other-ns"}},
	}
	for _, tt := range tests {
		var got []string
		s.Matching(tt.ns, tt.labels, func(k string) { got = append(got, k) })
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Matching(%s, %v) = %v, want %v", tt.ns, tt.labels, got, tt.want)
		}
	}
	if s.Len() != 5 {
		t.Errorf("Len() = %d, want 5", s.Len())
	}
}
