package promtext

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestSum(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		metric  string
		want    float64
		wantN   int
		wantErr string
	}{
		{name: "plain gauge", body: "# TYPE inflight gauge\ninflight 3\n", metric: "inflight", want: 3, wantN: 1},
		{name: "labels summed", body: "reqs{code=\"200\"} 5\nreqs{code=\"500\"} 2.5\n", metric: "reqs", want: 7.5, wantN: 2},
		{name: "prefix is another metric", body: "reqs_total 100\nreqs 1\n", metric: "reqs", want: 1, wantN: 1},
		{name: "timestamp", body: "g 4 1700000000000\n", metric: "g", want: 4, wantN: 1},
		{name: "escaped label", body: `g{path="a\"}b\\",x="\n"} 2` + "\n", metric: "g", want: 2, wantN: 1},
		{name: "trailing comma", body: "g{a=\"1\",} 2\n", metric: "g", want: 2, wantN: 1},
		{name: "crlf", body: "g 2\r\n", metric: "g", want: 2, wantN: 1},
		{name: "no final newline", body: "g 9", metric: "g", want: 9, wantN: 1},
		{name: "other metric malformed is skipped", body: "other{ 1\ng 1\n", metric: "g", want: 1, wantN: 1},
		{name: "missing", body: "h 1\n", metric: "g", wantErr: "metric not found"},
		{name: "empty", body: "", metric: "g", wantErr: "metric not found"},
		{name: "bad value", body: "g one\n", metric: "g", wantErr: `line 1: g: value "one"`},
		{name: "missing value", body: "g{a=\"1\"}\n", metric: "g", wantErr: "missing value"},
		{name: "unterminated labels", body: "g{a=\"1\" 2\n", metric: "g", wantErr: "want ',' or '}'"},
		{name: "unquoted label", body: "g{a=1} 2\n", metric: "g", wantErr: "not quoted"},
		{name: "bad escape", body: `g{a="\q"} 2` + "\n", metric: "g", wantErr: "invalid escape"},
		{name: "bad timestamp", body: "g 1 soon\n", metric: "g", wantErr: "timestamp"},
		{name: "junk after timestamp", body: "g 1 2 3\n", metric: "g", wantErr: "after the timestamp"},
		{name: "bad metric name", body: "g 1\n", metric: "9g", wantErr: "metric name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := Sum([]byte(tt.body), tt.metric)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Sum = %v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || n != tt.wantN {
				t.Errorf("Sum = %v, %d, %v; want %v, %d", got, n, err, tt.want, tt.wantN)
			}
		})
	}
	if _, _, err := Sum([]byte("h 1\n"), "g"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing metric error %v is not ErrNotFound", err)
	}
}

func TestSumSpecialValues(t *testing.T) {
	v, _, err := Sum([]byte("g NaN\n"), "g")
	if err != nil || !math.IsNaN(v) {
		t.Errorf("NaN: got %v, %v", v, err)
	}
	v, _, err = Sum([]byte("g -Inf\n"), "g")
	if err != nil || !math.IsInf(v, -1) {
		t.Errorf("-Inf: got %v, %v", v, err)
	}
}

func TestIsContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/plain; version=0.0.4; charset=utf-8": true,
		"text/plain":               true,
		"Text/Plain;charset=utf-8": true,
		"application/openmetrics-text; version=1.0.0":            true,
		"application/protobuf":                                   false,
		"application/vnd.google.protobuf; proto=io.prometheus.x": false,
		"": false,
	} {
		if got := IsContentType(ct); got != want {
			t.Errorf("IsContentType(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestSumDoesNotAllocate(t *testing.T) {
	body := []byte("# HELP x y\n# TYPE inflight gauge\nother_metric{a=\"b\"} 1\ninflight{pod=\"p\"} 3 17\n")
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := Sum(body, "inflight"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Sum allocates %v times per call, want 0", allocs)
	}
}

// FuzzSum checks Sum never panics and agrees with prometheus/common's
// parser wherever that parser accepts the body.
func FuzzSum(f *testing.F) {
	for _, s := range []string{
		"# TYPE inflight gauge\ninflight 3\n",
		"inflight{a=\"1\",b=\"x\\\"y\"} 2 1000\ninflight{a=\"2\"} -1\n",
		"# TYPE inflight counter\ninflight 1e3\n",
		"inflight NaN\n",
		"inflight{a=\"\\n\"} +Inf\n",
		"inflight_total 3\ninflight 1\n",
		"inflight{",
		"",
	} {
		f.Add([]byte(s))
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	f.Fuzz(func(t *testing.T, body []byte) {
		got, n, err := Sum(body, "inflight")
		fams, perr := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if perr != nil {
			return // expfmt refuses it; Sum may be more lenient
		}
		fam, ok := fams["inflight"]
		if !ok || len(fam.GetMetric()) == 0 {
			if err == nil {
				t.Fatalf("Sum = %v (%d samples) for a body without inflight samples per expfmt", got, n)
			}
			return
		}
		if fam.GetType().String() != "GAUGE" && fam.GetType().String() != "COUNTER" && fam.GetType().String() != "UNTYPED" {
			return
		}
		if err != nil {
			t.Fatalf("Sum: %v; expfmt accepts the body", err)
		}
		var want float64
		for _, m := range fam.GetMetric() {
			switch {
			case m.Gauge != nil:
				want += m.GetGauge().GetValue()
			case m.Counter != nil:
				want += m.GetCounter().GetValue()
			default:
				want += m.GetUntyped().GetValue()
			}
		}
		if n != len(fam.GetMetric()) || !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("Sum = %v over %d samples, expfmt gives %v over %d", got, n, want, len(fam.GetMetric()))
		}
	})
}

func BenchmarkSum(b *testing.B) {
	body := []byte("# HELP go_goroutines x\n# TYPE go_goroutines gauge\ngo_goroutines 42\n# TYPE inflight gauge\ninflight{pod=\"p\"} 3\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Sum(body, "inflight"); err != nil {
			b.Fatal(err)
		}
	}
}
