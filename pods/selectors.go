package pods

import (
	"sync"

	"k8s.io/apimachinery/pkg/labels"
)

// Selectors maps a pod's labels to the keys (targets, PodAutoscalers) whose
// selectors match it, looking only at the selectors anchored on one of the
// pod's labels instead of every selector of the cluster. It holds one entry
// per key set; Delete removes it.
type Selectors[K comparable] struct {
	// mu guards both maps.
	mu sync.RWMutex
	// byKey is each key's selector and the anchor it is filed under.
	byKey map[K]filed
	// byAnchor files keys by LabelKey of their anchor label, or by
	// namespace + "/*" for a selector without one.
	byAnchor map[string]map[K]labels.Selector
}

type filed struct {
	anchor string
	sel    labels.Selector
}

// NewSelectors returns an empty Selectors.
func NewSelectors[K comparable]() *Selectors[K] {
	return &Selectors[K]{byKey: map[K]filed{}, byAnchor: map[string]map[K]labels.Selector{}}
}

func anyLabel(ns string) string { return ns + "/*" }

// Set files k's selector for pods of namespace ns, replacing its previous one.
func (s *Selectors[K]) Set(k K, ns string, sel labels.Selector) {
	a := anyLabel(ns)
	if key, v, ok := Anchor(sel); ok {
		a = LabelKey(ns, key, v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(k)
	s.byKey[k] = filed{anchor: a, sel: sel}
	m := s.byAnchor[a]
	if m == nil {
		m = map[K]labels.Selector{}
		s.byAnchor[a] = m
	}
	m[k] = sel
}

// Delete forgets k.
func (s *Selectors[K]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(k)
}

func (s *Selectors[K]) deleteLocked(k K) {
	f, ok := s.byKey[k]
	if !ok {
		return
	}
	delete(s.byKey, k)
	if m := s.byAnchor[f.anchor]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(s.byAnchor, f.anchor)
		}
	}
}

// Len is the number of keys.
func (s *Selectors[K]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byKey)
}

// Matching calls f for every key whose selector matches labels ls of a pod
// in namespace ns. f must not call back into s.
func (s *Selectors[K]) Matching(ns string, ls map[string]string, f func(K)) {
	set := labels.Set(ls)
	s.mu.RLock()
	defer s.mu.RUnlock()
	visit := func(anchor string) {
		for k, sel := range s.byAnchor[anchor] {
			if sel.Matches(set) {
				f(k)
			}
		}
	}
	for k, v := range ls {
		visit(LabelKey(ns, k, v))
	}
	visit(anyLabel(ns))
}
