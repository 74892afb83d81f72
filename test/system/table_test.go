package system

import "testing"

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
