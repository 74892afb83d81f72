package keyval

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

type settings struct {
	N     int64
	F     float64
	B     bool
	D     time.Duration
	S     time.Duration
	Color string
}

func keys(sp Spelling) *Keys[settings] {
	return New(sp,
		Set("n", Int[int64](0, 100), func(s *settings, n int64) { s.N = n }).Alias("legacyN"),
		Set("f", Float(AtLeast(0.5)), func(s *settings, f float64) { s.F = f }),
		Set("b", Bool(), func(s *settings, b bool) { s.B = b }),
		Set("d", Duration(true, Between(time.Second, time.Hour)), func(s *settings, d time.Duration) { s.D = d }),
		Set("s", Count(time.Second), func(s *settings, d time.Duration) { s.S = d }),
		Set("color", OneOf(map[string]string{"red": "r", "blue": "b"}), func(s *settings, c string) { s.Color = c }),
	)
}

func TestSpellings(t *testing.T) {
	tests := []struct {
		name    string
		sp      Spelling
		data    map[string]string
		want    settings
		wantErr string // the refused key; empty means accepted
	}{
		{"every kind", Knative, map[string]string{"n": "7", "f": "1.5", "b": "t", "d": "2m", "s": "30", "color": "red"},
			settings{N: 7, F: 1.5, B: true, D: 2 * time.Minute, S: 30 * time.Second, Color: "r"}, ""},
		{"strconv's booleans", Knative, map[string]string{"b": "1"}, settings{B: true}, ""},
		{"Knative keeps spaces", Knative, map[string]string{"n": " 7"}, settings{}, "n"},
		{"KEDA trims", KEDA, map[string]string{"n": " 7 ", "b": " TRUE"}, settings{N: 7, B: true}, ""},
		{"KEDA reads an empty value as absent", KEDA, map[string]string{"n": "  ", "f": ""}, settings{}, ""},
		{"Knative refuses an empty value", Knative, map[string]string{"f": ""}, settings{}, "f"},
		{"KEDA: no plus sign", KEDA, map[string]string{"n": "+5"}, settings{}, "n"},
		{"KEDA: no leading zero", KEDA, map[string]string{"n": "05"}, settings{}, "n"},
		{"KEDA: zero and minus zero", KEDA, map[string]string{"s": "0", "n": "-0"}, settings{}, ""},
		{"Knative: a plus sign", Knative, map[string]string{"n": "+5"}, settings{N: 5}, ""},
		{"out of range", Knative, map[string]string{"n": "101"}, settings{}, "n"},
		{"not finite", Knative, map[string]string{"f": "NaN"}, settings{}, "f"},
		{"below its bound", Knative, map[string]string{"f": "0.25"}, settings{}, "f"},
		{"not whole seconds", Knative, map[string]string{"d": "1500ms"}, settings{}, "d"},
		{"not one of", Knative, map[string]string{"color": "green"}, settings{}, "color"},
		{"the alias", Knative, map[string]string{"legacyN": "3"}, settings{N: 3}, ""},
		{"the key wins over its alias", Knative, map[string]string{"legacyN": "bad", "n": "4"}, settings{N: 4}, ""},
		{"the first refusal in key order", Knative, map[string]string{"n": "x", "b": "x", "f": "x"}, settings{}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got settings
			unknown, err := keys(tt.sp).Parse(&got, tt.data)
			if len(unknown) != 0 {
				t.Errorf("unknown = %v", unknown)
			}
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Errorf("Parse = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var ke *Error
			if !errors.As(err, &ke) || ke.Key != tt.wantErr || ke.Value != tt.data[tt.wantErr] || !strings.Contains(err.Error(), ": want ") {
				t.Errorf("Parse = %v, want a refusal of %s %q", err, tt.wantErr, tt.data[tt.wantErr])
			}
		})
	}
}

func TestUnknownKeysAreReturnedSorted(t *testing.T) {
	var s settings
	unknown, err := keys(KEDA).Parse(&s, map[string]string{"zz": "1", "n": "2", "aa": ""})
	if err != nil || len(unknown) != 2 || unknown[0] != "aa" || unknown[1] != "zz" || s.N != 2 {
		t.Errorf("Parse = %v, %v, %+v; want [aa zz] unknown and n set", unknown, err, s)
	}
	if !keys(KEDA).Known("legacyN") || keys(KEDA).Known("zz") {
		t.Error("Known: want aliases known, others not")
	}
	if name, v, ok := keys(KEDA).Lookup(map[string]string{"legacyN": "9"}, "n"); !ok || name != "legacyN" || v != "9" {
		t.Errorf("Lookup = %q %q %v", name, v, ok)
	}
}

func TestErrorsAreBounded(t *testing.T) {
	long := strings.Repeat("x", 5000)
	e := Refuse(long+"\n", long, "a number in [%d, %d]", 0, math.MaxInt32)
	msg := e.Error()
	if len(msg) > 400 || !strings.Contains(msg, "(5000 bytes)") || !strings.Contains(msg, "(5001 bytes)") || strings.Contains(msg, "\n") {
		t.Errorf("error is %d bytes: %.300q", len(msg), msg)
	}
	if got := Name("autoscaling.knative.dev/min-scale"); got != "autoscaling.knative.dev/min-scale" {
		t.Errorf("a plain key is shown as %s", got)
	}
	if got := Unknown("k", "v", "parameter").Error(); got != `k "v": unknown parameter` {
		t.Errorf("Unknown = %q", got)
	}
}

func TestList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"a", []string{"a"}},
		{" a:1, b:2 ,,c ", []string{"a:1", "b:2", "c"}},
	} {
		if got := List(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
