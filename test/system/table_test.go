package system

import (
	"testing"
	"time"
)

func TestOneDecimal(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0.0"},
		{-0.01, "0.0"},
		{-0.04, "0.0"},
		{-0.06, "-0.1"},
		{12.345, "12.3"},
		{299.96, "300.0"},
	}
	for _, tt := range tests {
		if got := oneDecimal(tt.v); got != tt.want {
			t.Errorf("oneDecimal(%g) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestPhaseAt(t *testing.T) {
	starts := []time.Duration{0, 20 * time.Second, 50 * time.Second}
	const cycle = 60 * time.Second
	tests := []struct {
		elapsed time.Duration
		want    int
	}{
		{0, 0},
		{19 * time.Second, 0},
		{20 * time.Second, 1},
		{49 * time.Second, 1},
		{50 * time.Second, 2},
		{59 * time.Second, 2},
		{60 * time.Second, 0}, // the script starts over
		{81 * time.Second, 1},
	}
	for _, tt := range tests {
		if got := PhaseAt(tt.elapsed, cycle, starts); got != tt.want {
			t.Errorf("PhaseAt(%v) = %d, want %d", tt.elapsed, got, tt.want)
		}
	}
}
