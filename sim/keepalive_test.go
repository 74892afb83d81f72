package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/sim/trace"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

func predictiveDefaults(tb testing.TB) *Configuration {
	c := knativeDefaults(tb)
	c.Name = "predictive"
	c.Annotations = map[string]string{kpaconfig.AnnotationKeepAlive: kpaconfig.KeepAlivePredictiveValue}
	if err := c.Check(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// timerTrace is one request every period for span, per second.
func timerTrace(period, span time.Duration) trace.Trace {
	counts := make([]int64, span/time.Second)
	for s := time.Duration(0); s < span; s += period {
		counts[s/time.Second] = 1
	}
	return trace.Trace{Name: "timer", Width: time.Second, Counts: counts}
}

func TestPredictiveKeepAliveOnATimer(t *testing.T) {
	// A 10-minute timer for 12 hours: Knative's defaults (a stable window
	// and a 30 s grace) scale to zero between every two requests, so each
	// finds no warm pod; the predictive policy learns the gap from the
	// first ten and pre-warms a pod for every later one.
	tr := timerTrace(10*time.Minute, 12*time.Hour)
	rs, err := Compare(&tr, []Configuration{*knativeDefaults(t), *predictiveDefaults(t)}, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	knative, predictive := rs[0], rs[1]
	t.Logf("\n%s", table(t, rs))
	if knative.ColdStartRequests != tr.Total() {
		t.Errorf("knative: %d of %d requests found no warm pod, want all", knative.ColdStartRequests, tr.Total())
	}
	// The first request and the ten gaps it takes to learn: at most 11.
	if predictive.ColdStartRequests > 11 {
		t.Errorf("predictive: %d cold-start requests, want at most 11 (the learning)", predictive.ColdStartRequests)
	}
	// Warm from 9 to 11 minutes after each request (and 4 s after it),
	// against Knative's minute and a half: at most twice the idle time.
	if predictive.IdlePodSeconds > 2*knative.IdlePodSeconds {
		t.Errorf("predictive idle pod-seconds %.0f, knative %.0f: want at most twice", predictive.IdlePodSeconds, knative.IdlePodSeconds)
	}
	if got, want := predictive.ColdStartRates.Quantile(0.5), float64(predictive.ColdStartRequests)/float64(predictive.Arrived); math.Abs(got-want) > 1e-4 {
		t.Errorf("one target's rate p50 %v, want its own rate", got)
	}
}

func TestSkipIdleChangesNothingWithKeepAlive(t *testing.T) {
	// The replay skips idle stretches only up to the policy's pre-warm.
	cfgs := []Configuration{*predictiveDefaults(t)}
	for _, tr := range []trace.Trace{syntheticDay(7, 40), timerTrace(17*time.Minute, 8*time.Hour)} {
		skip, err := Compare(&tr, cfgs, Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		full, err := Compare(&tr, cfgs, Options{Seed: 3, NoSkip: true})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := table(t, skip), table(t, full); a != b {
			t.Errorf("%s: with idle skipping\n%s\nticking through\n%s", tr.Name, a, b)
		}
	}
}

func TestSweep(t *testing.T) {
	base := []Configuration{*knativeDefaults(t), *predictiveDefaults(t)}
	got, err := Sweep(base, []time.Duration{0, 90 * time.Second, 10 * time.Minute, time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	want := "knative-defaults keep-alive=0,knative-defaults keep-alive=1m30s,knative-defaults keep-alive=10m,knative-defaults keep-alive=1h," +
		"predictive keep-alive=0,predictive keep-alive=1m30s,predictive keep-alive=10m,predictive keep-alive=1h"
	if strings.Join(names, ",") != want {
		t.Errorf("names %v\nwant %s", names, want)
	}
	if v := got[2].Autoscaler[kpaconfig.KeyScaleToZeroPodRetentionPeriod]; v != "10m0s" {
		t.Errorf("retention %q, want 10m0s", v)
	}
	if base[0].Autoscaler != nil || got[6].Annotations[kpaconfig.AnnotationKeepAlive] != "predictive" {
		t.Error("the sweep changed its base, or lost its annotations")
	}
	lag := Configuration{Name: "lag", Strategy: StrategyLag}
	pinned := *knativeDefaults(t)
	pinned.Annotations = map[string]string{kpaconfig.AnnotationScaleToZeroPodRetentionPeriod: "1m"}
	for _, tc := range []struct {
		cfgs []Configuration
		n    int
		want string
	}{
		{[]Configuration{lag}, 1, "a lag configuration has no keep-alive"},
		{[]Configuration{pinned}, 1, "would override the swept keep-alive"},
		{base, 33, "want at most 64"},
	} {
		kas := make([]time.Duration, tc.n)
		if _, err := Sweep(tc.cfgs, kas); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Sweep: %v, want an error containing %q", err, tc.want)
		}
	}
}

func TestWriteJSONAndPareto(t *testing.T) {
	tr := timerTrace(10*time.Minute, 3*time.Hour)
	cfgs, err := Sweep([]Configuration{*knativeDefaults(t), *predictiveDefaults(t)}, []time.Duration{0, 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compare(&tr, cfgs, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, rs); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Configurations []map[string]any `json:"configurations"`
	}
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Configurations) != 4 {
		t.Fatalf("%d configurations in the JSON, want 4", len(out.Configurations))
	}
	for _, key := range []string{"name", "requests", "coldStartRequests", "podSeconds", "idlePodSeconds", "coldStartRateP50", "coldStartRateP75", "coldStartRateP90"} {
		if _, ok := out.Configurations[0][key]; !ok {
			t.Errorf("JSON lacks %s: %s", key, b.String())
		}
	}
	if out.Configurations[0]["requests"].(float64) != float64(tr.Total()) {
		t.Errorf("requests %v, want %d", out.Configurations[0]["requests"], tr.Total())
	}
	path := filepath.Join(t.TempDir(), "front.png")
	if err := PlotPareto(path, cfgs, rs); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("pareto: %d bytes, %v; want a PNG", len(data), err)
	}
}

func TestCompareSourceInOrderWhateverTheWorkers(t *testing.T) {
	// Several days of several functions: the same totals and the same
	// per-function rates with one worker or three.
	dir := t.TempDir()
	var paths []string
	for d := range 2 {
		var b strings.Builder
		b.WriteString("HashOwner,HashApp,HashFunction,Trigger")
		for m := 1; m <= trace.Minutes; m++ {
			b.WriteString("," + itoa(m))
		}
		b.WriteString("\n")
		for f := range 5 {
			b.WriteString("o,a" + itoa(f%3) + ",f" + itoa(f) + ",http")
			for m := range trace.Minutes {
				c := 0
				if (m+d*trace.Minutes)%(40*(f+1)) == 0 {
					c = 1 + f
				}
				b.WriteString("," + itoa(c))
			}
			b.WriteString("\n")
		}
		p := filepath.Join(dir, "d0"+itoa(d+1)+".csv")
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	run := func(workers int, group trace.Group) []*Result {
		src, closeFn, err := trace.OpenAzure(paths, group)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = closeFn() }()
		rs, err := CompareSource(src, []Configuration{*knativeDefaults(t), *predictiveDefaults(t)}, Options{Seed: 1}, AzureOptions{Parallel: workers})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	one, three := run(1, trace.ByFunction), run(3, trace.ByFunction)
	if !reflect.DeepEqual(one, three) {
		t.Errorf("one worker:\n%s\nthree:\n%s", table(t, one), table(t, three))
	}
	if one[0].Targets != 5 || one[0].Duration != 5*48*time.Hour {
		t.Errorf("%d targets over %s, want 5 functions of two days", one[0].Targets, one[0].Duration)
	}
	apps := run(2, trace.ByApp)
	if apps[0].Targets != 3 || apps[0].Arrived != one[0].Arrived {
		t.Errorf("by application: %d targets, %d requests; want 3 applications with the functions' %d", apps[0].Targets, apps[0].Arrived, one[0].Arrived)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
