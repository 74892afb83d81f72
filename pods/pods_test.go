package pods

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	for i := range 4 {
		_ = idx.Add(pod("a", fmt.Sprintf("web-%d", i), i < 3, map[string]string{"app": "web", "tier": fmt.Sprint(i % 2)}))
	}
	_ = idx.Add(pod("a", "db-0", true, map[string]string{"app": "db"}))
	_ = idx.Add(pod("b", "web-0", true, map[string]string{"app": "web"}))

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
	for _, ready := range []bool{true, false} {
		p := pod("a", "web-0", ready, map[string]string{"app": "web"})
		out, err := Trim(p)
		if err != nil {
			t.Fatal(err)
		}
		tp := out.(*corev1.Pod)
		if Ready(tp) != Ready(p) || tp.Status.PodIP != p.Status.PodIP || tp.Labels["app"] != "web" {
			t.Errorf("Trim lost what Ready, the IP or the labels need: %+v", tp)
		}
		if len(tp.Spec.Containers) != 0 || len(tp.Status.Conditions) != 1 {
			t.Errorf("Trim kept the spec or other conditions: %+v", tp)
		}
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
