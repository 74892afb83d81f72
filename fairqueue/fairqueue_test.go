package fairqueue

import (
	"fmt"
	"slices"
	"testing"
)

type push struct {
	class Class
	ns    string
	v     string
	front bool
}

func TestPopOrder(t *testing.T) {
	tests := []struct {
		name   string
		pushes []push
		remove []string
		want   []string
	}{
		{
			name:   "classes in order whatever came first",
			pushes: []push{{Down, "a", "d1", false}, {Up, "a", "u1", false}, {Wake, "a", "w1", false}, {Down, "a", "d2", false}},
			want:   []string{"w1", "u1", "d1", "d2"},
		},
		{
			name: "namespaces take turns within a class",
			pushes: []push{
				{Up, "a", "a1", false}, {Up, "a", "a2", false}, {Up, "a", "a3", false},
				{Up, "b", "b1", false}, {Up, "c", "c1", false}, {Up, "b", "b2", false},
			},
			want: []string{"a1", "b1", "c1", "a2", "b2", "a3"},
		},
		{
			name:   "front goes ahead of its namespace only",
			pushes: []push{{Up, "a", "a1", false}, {Up, "b", "b1", false}, {Up, "a", "a0", true}},
			want:   []string{"a0", "b1", "a1"},
		},
		{
			name:   "removed entries are not popped and an emptied namespace leaves its turn",
			pushes: []push{{Down, "a", "a1", false}, {Down, "b", "b1", false}, {Down, "b", "b2", false}, {Wake, "c", "c1", false}},
			remove: []string{"a1", "c1"},
			want:   []string{"b1", "b2"},
		},
		{
			name:   "a class past the last is served as down",
			pushes: []push{{NumClasses + 3, "a", "x", false}, {Down, "a", "d", false}, {Up, "a", "u", false}},
			want:   []string{"u", "x", "d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[string]
			entries := map[string]*Entry[string]{}
			for _, p := range tt.pushes {
				entries[p.v] = q.Push(p.class, p.ns, p.v, p.front)
			}
			for _, v := range tt.remove {
				if !q.Remove(entries[v]) {
					t.Fatalf("Remove(%s) = false, want true", v)
				}
				if q.Remove(entries[v]) {
					t.Fatalf("second Remove(%s) = true, want false", v)
				}
			}
			if q.Len() != len(tt.want) {
				t.Errorf("Len() = %d, want %d", q.Len(), len(tt.want))
			}
			var got []string
			for {
				e, ok := q.Pop()
				if !ok {
					break
				}
				if e.Queued() {
					t.Errorf("%s still queued after Pop", e.Value)
				}
				got = append(got, e.Value)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("popped %v, want %v", got, tt.want)
			}
			for c := range NumClasses {
				if n := q.LenClass(c); n != 0 {
					t.Errorf("LenClass(%s) = %d after draining", c, n)
				}
				if n := q.Namespaces(c); n != 0 {
					t.Errorf("class %s keeps %d namespaces after draining: the map must shrink", c, n)
				}
			}
		})
	}
}

func TestOf(t *testing.T) {
	tests := []struct {
		current int32
		known   bool
		desired int32
		want    Class
	}{
		{0, true, 1, Wake},
		{0, true, 0, Down},
		{2, true, 3, Up},
		{3, true, 3, Down},
		{3, true, 1, Down},
		{0, false, 1, Up},
		{0, false, 0, Down},
	}
	for _, tt := range tests {
		if got := Of(tt.current, tt.known, tt.desired); got != tt.want {
			t.Errorf("Of(%d, %t, %d) = %s, want %s", tt.current, tt.known, tt.desired, got, tt.want)
		}
	}
}

// BenchmarkPushPop is one tick's worth of targets through the queue: 1,000
// targets in 20 namespaces across the three classes.
func BenchmarkPushPop(b *testing.B) {
	const targets = 1000
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%d", i)
	}
	var q Queue[int]
	b.ReportAllocs()
	for b.Loop() {
		for i := range targets {
			q.Push(Class(i%int(NumClasses)), names[i%len(names)], i, false)
		}
		for q.Len() > 0 {
			q.Pop()
		}
	}
}
