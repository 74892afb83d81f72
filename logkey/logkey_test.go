package logkey

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := NewLimiter(time.Minute)
	t0 := time.Unix(1000, 0)
	steps := []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"ns/a", 0, true},
		{"ns/a", time.Second, false},
		{"ns/b", time.Second, true},
		{"ns/a", 59 * time.Second, false},
		{"ns/a", 60 * time.Second, true},
		{"ns/a", 61 * time.Second, false},
		{"ns/b", 3 * time.Minute, true}, // after a sweep forgot it
	}
	for i, s := range steps {
		if got := l.Allow(s.key, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: Allow(%s, +%s) = %v, want %v", i, s.key, s.at, got, s.want)
		}
	}
	if n := len(l.last); n > 2 {
		t.Errorf("limiter tracks %d keys, want quiet ones forgotten", n)
	}
}
