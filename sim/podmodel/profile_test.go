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
		{"spike before offset", Spikes{Base: 1, Peak: 50, Period: 10 * time.Second, Width: time.Second, Offset: 5 * time.Second}, 4 * time.Second, 1},
		{"spike inside", Spikes{Base: 1, Peak: 50, Period: 10 * time.Second, Width: time.Second, Offset: 5 * time.Second}, 15500 * time.Millisecond, 50},
		{"spike after width", Spikes{Base: 1, Peak: 50, Period: 10 * time.Second, Width: time.Second, Offset: 5 * time.Second}, 16 * time.Second, 1},
		{"series", Series{Rates: []float64{1, 2, 3}}, 1500 * time.Millisecond, 2},
		{"series past end", Series{Rates: []float64{1, 2, 3}}, 3 * time.Second, 0},
		{"series loops", Series{Rates: []float64{1, 2, 3}, Loop: true}, 4 * time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.profile.Rate(tt.at); got != tt.want {
				t.Errorf("Rate(%s) = %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}

func TestParseCSV(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []float64
		wantErr string
	}{
		{"one column", "5\n6.5\n0\n", []float64{5, 6.5, 0}, ""},
		{"header and two columns", "second,rate\n0,10\n1,20\n", []float64{10, 20}, ""},
		{"comments", "# trace\n1\n# gap\n2\n", []float64{1, 2}, ""},
		{"negative", "1\n-2\n", nil, `line 2: rate "-2": want a finite rate >= 0`},
		{"not a number", "1\nlots\n", nil, `line 2: rate "lots" is not a number`},
		{"second out of order", "0,1\n2,1\n", nil, `line 2: second "2", want 1`},
		{"three columns", "0,1,2\n", nil, "line 1: 3 columns"},
		{"empty", "", nil, "no rates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCSV(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseCSV error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Rates) != len(tt.want) {
				t.Fatalf("ParseCSV = %v, want %v", got.Rates, tt.want)
			}
			for i := range tt.want {
				if got.Rates[i] != tt.want[i] {
					t.Fatalf("ParseCSV = %v, want %v", got.Rates, tt.want)
				}
			}
		})
	}
}

func TestStepsValidate(t *testing.T) {
	if err := (Steps{{At: 2 * time.Second}, {At: time.Second}}).Validate(); err == nil || !contains(err.Error(), "steps[1].at = 1s") {
		t.Errorf("Validate(unsorted) = %v", err)
	}
	if err := (Steps{{Rate: -1}}).Validate(); err == nil || !contains(err.Error(), "steps[0].rate = -1") {
		t.Errorf("Validate(negative) = %v", err)
	}
}
