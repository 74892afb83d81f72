package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidalscale/tidal/sim/tracegen"
)

func TestRun(t *testing.T) {
	png := filepath.Join(t.TempDir(), "out.png")
	tests := []struct {
		name string
		f    flags
		want []string
	}{
		{"rates with a plot", flags{config: "../../sim/testdata/configs.yaml", rates: "../../sim/testdata/makerun.csv", plot: png, seed: 1},
			[]string{"knative-defaults", "scale-down-delay-5m", "plot: " + png}},
		{"azure, one function", flags{config: "../../sim/testdata/configs.yaml", azure: "../../sim/testdata/azure-sample.csv", limit: 1, seed: 1},
			[]string{"knative-defaults", "kpa        1"}},
		{"lag", flags{config: "../../sim/testdata/lag.yaml", rates: "../../sim/testdata/records.csv", seed: 1},
			[]string{"riff-idle-10s", "lag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f.validate(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(&tt.f, &out); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, out.String())
				}
			}
		})
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Fatalf("plot %s: %v", png, err)
	}
}

func TestFlagsRefused(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-rates", "x.csv"}, "-config: required"},
		{[]string{"-config", "c.yaml"}, "exactly one of"},
		{[]string{"-config", "c.yaml", "-rates", "a", "-azure", "b"}, "exactly one of"},
		{[]string{"-config", "c.yaml", "-rates", "a", "-limit", "3"}, "only with -azure"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-limit", "-3"}, "-limit -3"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-keep-alive-sweep", "0,5x"}, "-keep-alive-sweep"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-keep-alive-sweep", "-1m"}, "-keep-alive-sweep"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-format", "xml"}, "-format"},
		{[]string{"-config", "c.yaml", "-rates", "a", "-group", "app"}, "only with -azure"},
		{[]string{"-config", "c.yaml", "-azure", "a", "-group", "owner"}, "-group"},
	}
	for _, tt := range tests {
		var f flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if err := f.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestBadInputNamesLineAndField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("second,rate\n0,3\n1,-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := flags{config: "../../sim/testdata/configs.yaml", rates: bad}
	err := run(&f, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "field rate") {
		t.Fatalf("run on a negative rate: %v, want line 3, field rate", err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("configurations:\n- name: a\n  autoscaler: {stable-windw: 30s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f = flags{config: cfg, rates: "../../sim/testdata/makerun.csv"}
	if err := run(&f, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "stable-windw") {
		t.Fatalf("run with an unknown key: %v, want it named", err)
	}
}

// summary is the JSON's per-configuration object, as a consumer reads it.
type summary struct {
	Name              string   `json:"name"`
	Requests          *int64   `json:"requests"`
	ColdStartRequests *int64   `json:"coldStartRequests"`
	PodSeconds        *float64 `json:"podSeconds"`
	IdlePodSeconds    *float64 `json:"idlePodSeconds"`
	P50               *float64 `json:"coldStartRateP50"`
	P75               *float64 `json:"coldStartRateP75"`
	P90               *float64 `json:"coldStartRateP90"`
}

// runJSON runs tidal-sim with f and reads its JSON, checking every
// configuration's fields for presence and consistency.
func runJSON(t *testing.T, f flags) []summary {
	t.Helper()
	f.format = "json"
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(&f, &out); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Configurations []summary `json:"configurations"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, c := range doc.Configurations {
		if c.Requests == nil || c.ColdStartRequests == nil || c.PodSeconds == nil || c.IdlePodSeconds == nil || c.P50 == nil || c.P75 == nil || c.P90 == nil {
			t.Fatalf("%s: a field is missing: %s", c.Name, out.String())
		}
		if *c.ColdStartRequests < 0 || *c.ColdStartRequests > *c.Requests {
			t.Errorf("%s: %d cold-start requests of %d", c.Name, *c.ColdStartRequests, *c.Requests)
		}
		if *c.IdlePodSeconds < 0 || *c.IdlePodSeconds > *c.PodSeconds {
			t.Errorf("%s: %.0f idle pod-seconds of %.0f", c.Name, *c.IdlePodSeconds, *c.PodSeconds)
		}
		if !(0 <= *c.P50 && *c.P50 <= *c.P75 && *c.P75 <= *c.P90 && *c.P90 <= 1) {
			t.Errorf("%s: cold-start rates p50 %v, p75 %v, p90 %v: want 0 <= p50 <= p75 <= p90 <= 1", c.Name, *c.P50, *c.P75, *c.P90)
		}
	}
	return doc.Configurations
}

func names(cs []summary) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

func TestSweepJSONAndPareto(t *testing.T) {
	// Two functions of the Azure sample (a 5-minute timer and a rare HTTP
	// caller), each configuration at two fixed keep-alives.
	png := filepath.Join(t.TempDir(), "front.png")
	cs := runJSON(t, flags{config: "../../sim/testdata/keepalive.yaml", azure: "../../sim/testdata/azure-sample.csv", limit: 2, seed: 1,
		sweep: "0,10m", pareto: png, parallel: 2})
	if got, want := names(cs), "knative keep-alive=0,knative keep-alive=10m,predictive keep-alive=0,predictive keep-alive=10m"; got != want {
		t.Fatalf("configurations %s, want %s", got, want)
	}
	for _, c := range cs {
		if *c.Requests != 288+373 {
			t.Errorf("%s: %d requests, want the two functions' 661", c.Name, *c.Requests)
		}
	}
	// Ten minutes of retention keep the timer's pod between its calls:
	// more idle pod-seconds, fewer requests that find no pod.
	short, long := cs[0], cs[1]
	if *long.IdlePodSeconds <= *short.IdlePodSeconds || *long.ColdStartRequests >= *short.ColdStartRequests {
		t.Errorf("keep-alive 10m: %.0f idle pod-seconds, %d cold-start requests; keep-alive 0: %.0f, %d; want more idle, fewer cold",
			*long.IdlePodSeconds, *long.ColdStartRequests, *short.IdlePodSeconds, *short.ColdStartRequests)
	}
	data, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("pareto %s: %d bytes, %v; want a PNG", png, len(data), err)
	}
}

func TestGenerateThenReplay(t *testing.T) {
	// A small trace of the paper's mix, written in both formats; a sweep
	// over its two days replays every invocation, read from either.
	dir := t.TempDir()
	var out bytes.Buffer
	cfg := tracegen.Config{Functions: 6, Days: 2, Seed: 5}
	args := []string{"-functions", fmt.Sprint(cfg.Functions), "-days", fmt.Sprint(cfg.Days), "-seed", fmt.Sprint(cfg.Seed), "-out", dir, "-2021"}
	if err := generate(args, &out); err != nil {
		t.Fatal(err)
	}
	fns, err := tracegen.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	total := tracegen.Summarize(fns, cfg.Days).Invocations
	if want := fmt.Sprintf("6 functions in 6 applications over 2 days, %d invocations", total); !strings.Contains(out.String(), want) {
		t.Errorf("generate printed\n%s\nwant %q", out.String(), want)
	}
	days := filepath.Join(dir, "invocations_per_function_md.anon.d01.csv") + "," + filepath.Join(dir, "invocations_per_function_md.anon.d02.csv")
	base := flags{config: "../../sim/testdata/keepalive.yaml", seed: 1, sweep: "0,1h", parallel: 2}
	f2019, f2021 := base, base
	f2019.azure, f2021.azure2021 = days, filepath.Join(dir, "invocations_2021.csv")
	for name, f := range map[string]flags{"2019": f2019, "2021": f2021} {
		cs := runJSON(t, f)
		if len(cs) != 4 {
			t.Fatalf("%s: %d configurations, want 4", name, len(cs))
		}
		for _, c := range cs {
			if *c.Requests != int64(total) {
				t.Errorf("%s, %s: %d requests, want the trace's %d", name, c.Name, *c.Requests, total)
			}
		}
	}
	// -class writes the same functions of the classes named, and no other.
	some := t.TempDir()
	out.Reset()
	if err := generate(append(args[:len(args)-3:len(args)-3], "-out", some, "-class", "timer, rare"), &out); err != nil {
		t.Fatal(err)
	}
	var kept int
	for _, f := range fns {
		if f.Class == tracegen.Timer || f.Class == tracegen.Rare {
			kept += len(f.Starts)
		}
	}
	if !strings.Contains(out.String(), "regular     0") || !strings.Contains(out.String(), "rare        2") {
		t.Errorf("-class timer,rare wrote regular functions:\n%s", out.String())
	}
	f := base
	f.azure = filepath.Join(some, "invocations_per_function_md.anon.d01.csv") + "," + filepath.Join(some, "invocations_per_function_md.anon.d02.csv")
	for _, c := range runJSON(t, f) {
		if *c.Requests != int64(kept) {
			t.Errorf("-class timer,rare, %s: %d requests, want the timers' and rare functions' %d", c.Name, *c.Requests, kept)
		}
	}
	for _, bad := range [][]string{{"-functions", "3"}, {"-functions", "0", "-out", dir}, {"-days", "99", "-out", dir}, {"-out", dir, "-class", "timer,cron"}} {
		if err := generate(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("generate %v: no error", bad)
		}
	}
}
