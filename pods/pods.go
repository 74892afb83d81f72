// Package pods holds what tidal's collector and actuator both need of a
// target's pods: Knative's readiness rule, a trim of the pods an informer
// keeps, and an index that finds the pods a selector matches without
// scanning the namespace.
package pods

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
)

// Ready reports whether a pod counts as ready: Running, condition
// Ready=True, no deletion timestamp, and an IP (Knative's rule for the pods
// it scrapes and counts).
func Ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Trim is an informer transform that keeps only the fields tidal reads of a
// pod (identity, labels, owners, deletion, phase, IP, start time and the
// Ready condition), so that tens of thousands of pods fit in a small cache.
func Trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone passes as it is
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			OwnerReferences:   p.OwnerReferences,
			CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, StartTime: p.Status.StartTime},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return out, nil
}

// IndexLabel is the name of the index AddLabelIndex adds.
const IndexLabel = "label"

// AddLabelIndex indexes an informer's objects by namespace and each of
// their labels ("ns/key=value"), so List finds a selector's pods among its
// label's pods only.
func AddLabelIndex(inf cache.SharedIndexInformer) error {
	return inf.AddIndexers(cache.Indexers{IndexLabel: labelIndex})
}

func labelIndex(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	ls := m.GetLabels()
	out := make([]string, 0, len(ls))
	for k, v := range ls {
		out = append(out, LabelKey(m.GetNamespace(), k, v))
	}
	return out, nil
}

// LabelKey is the label index's key of label k=v in namespace ns.
func LabelKey(ns, k, v string) string { return ns + "/" + k + "=" + v }

// Anchor returns one label k=v that every object sel matches must carry;
// ok is false when sel requires no single label value.
func Anchor(sel labels.Selector) (k, v string, ok bool) {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return "", "", false
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := r.Values(); vals.Len() == 1 {
				return r.Key(), vals.UnsortedList()[0], true
			}
		}
	}
	return "", "", false
}

// List returns the objects in namespace ns that sel matches, through the
// label index when sel requires one label value, else by scanning the
// namespace. indexer must carry the label index and the namespace index.
func List(indexer cache.Indexer, ns string, sel labels.Selector) ([]any, error) {
	index, key := cache.NamespaceIndex, ns
	if k, v, ok := Anchor(sel); ok {
		index, key = IndexLabel, LabelKey(ns, k, v)
	}
	objs, err := indexer.ByIndex(index, key)
	if err != nil {
		return nil, err
	}
	out := objs[:0] // ByIndex returns a fresh slice: filter it in place
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && sel.Matches(labels.Set(m.GetLabels())) {
			out = append(out, o)
		}
	}
	return out, nil
}

// CountReady counts the ready pods in ns that sel matches.
func CountReady(indexer cache.Indexer, ns string, sel labels.Selector) (int32, error) {
	objs, err := List(indexer, ns, sel)
	if err != nil {
		return 0, err
	}
	var n int32
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && Ready(p) {
			n++
		}
	}
	return n, nil
}
