package podmodel

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }
func itoa(i int) string           { return strconv.Itoa(i) }

func TestProfiles(t *testing.T) {
	tests := []struct {
		name    string
		profile Profile
		at      time.Duration
		want    float64
	}{
		{"constant", Constant(7), time.Hour, 7},
		{"steps before first", Steps{{At: time.Second, Rate: 5}}, 0, 0},
		{"steps first", Steps{{At: time.Second, Rate: 5}, {At: 3 * time.Second, Rate: 9}}, 2 * time.Second, 5},
		{"steps at boundary", Steps{{At: time.Second, Rate: 5}, {At: 3 * time.Second, Rate: 9}}, 3 * time.Second, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.profile.Rate(tt.at); got != tt.want {
				t.Errorf("Rate(%s) = %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}
