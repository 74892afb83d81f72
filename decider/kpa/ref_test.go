package kpa

import (
	"errors"
	"testing"
)

// TestRef checks that recording through a Ref is recording through the key,
// and that a Ref dies with its target.
func TestRef(t *testing.T) {
	t.Parallel()
	s := NewSet()
	k := Key{Namespace: "ns", Name: "a"}
	if _, ok := s.Ref(k); ok {
		t.Fatal("Ref of a target not created: ok")
	}
	for _, key := range []Key{k, {Namespace: "ns", Name: "by-key"}} {
		if err := s.Create(key, testSpec(), at(0), 0); err != nil {
			t.Fatal(err)
		}
	}
	r, ok := s.Ref(k)
	if !ok {
		t.Fatal("Ref of a created target: not ok")
	}

	// The same history through the Ref and through the key.
	for sec := range 10 {
		st := Stat{AverageConcurrentRequests: float64(10 * sec), RequestCount: float64(sec)}
		if _, _, err := s.RecordRef(r, at(float64(sec)+0.5), at(float64(sec)+0.5), st, SourceScraper, 4, false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Record(Key{Namespace: "ns", Name: "by-key"}, at(float64(sec)+0.5), at(float64(sec)+0.5), st, SourceScraper); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetReady(Key{Namespace: "ns", Name: "by-key"}, 4); err != nil {
		t.Fatal(err)
	}
	s.Tick(at(10), nil)
	got, _, _ := s.Get(k)
	want, _, _ := s.Get(Key{Namespace: "ns", Name: "by-key"})
	if got.ReadyPods != 4 || got.ObservedStable != want.ObservedStable || got.Desired != want.Desired || got.Desired <= 0 {
		t.Errorf("through the Ref: ready %d, stable %v, desired %d; through the key: stable %v, desired %d",
			got.ReadyPods, got.ObservedStable, got.Desired, want.ObservedStable, want.Desired)
	}

	// A ready count alone changes no window; a refused stat keeps the count.
	if _, _, err := s.RecordRef(r, at(10.5), at(10.5), Stat{AverageConcurrentRequests: 1e6}, SourceScraper, 7, true); err != nil {
		t.Fatal(err)
	}
	if _, reason, err := s.RecordRef(r, at(10.5), at(10.5), Stat{RequestCount: -1}, SourceScraper, 9, false); reason != DropBadValue || err == nil {
		t.Errorf("RecordRef of a negative count = %v, %v; want %v and an error", reason, err, DropBadValue)
	}
	d, _, _ := s.Poke(k, at(11))
	if d.ReadyPods != 9 || d.ObservedStable != got.ObservedStable {
		t.Errorf("after a ready-only sample and a refused stat: ready %d, stable %v; want 9, %v", d.ReadyPods, d.ObservedStable, got.ObservedStable)
	}

	// A deleted target, or one created again, is not reached by the old Ref.
	s.Delete(k)
	if _, reason, err := s.RecordRef(r, at(11.5), at(11.5), Stat{}, SourceScraper, 1, false); !errors.Is(err, ErrUnknownTarget) || reason != DropUnknownTarget {
		t.Errorf("RecordRef after Delete = %v, %v; want %v", reason, err, ErrUnknownTarget)
	}
	if err := s.Create(k, testSpec(), at(12), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecordRef(r, at(12.5), at(12.5), Stat{}, SourceScraper, 1, false); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("old Ref after the target was created again = %v, want %v", err, ErrUnknownTarget)
	}
	if _, _, err := s.RecordRef(Ref{}, at(12.5), at(12.5), Stat{}, SourceScraper, 1, false); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("zero Ref = %v, want %v", err, ErrUnknownTarget)
	}
	if r2, ok := s.Ref(k); !ok || r2 == r {
		t.Errorf("Ref of the target created again: %v, same as the old: %v", ok, r2 == r)
	}
}
