package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/sim/trace"
)

func readConfigs(t *testing.T, name string) []Configuration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfgs
}

func readRates(t *testing.T, name string) trace.Trace {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.ReadRates(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDeterministic(t *testing.T) {
	// The same trace, seed and configurations give the same report and
	// timelines, byte for byte; another seed places arrivals differently.
	tr := readRates(t, "sample.csv")
	cfgs := readConfigs(t, "configs.yaml")
	run := func(seed uint64) (string, []*Result) {
		rs, err := Compare(&tr, cfgs, Options{Seed: seed, Timeline: true})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteTable(&b, rs); err != nil {
			t.Fatal(err)
		}
		return b.String(), rs
	}
	a, ra := run(1)
	b, rb := run(1)
	if a != b {
		t.Fatalf("same seed, different reports:\n%s\n%s", a, b)
	}
	if !reflect.DeepEqual(ra, rb) {
		t.Fatal("same seed, different results (timelines or histograms)")
	}
	if _, rc := run(2); reflect.DeepEqual(ra[0].Wait, rc[0].Wait) {
		t.Error("seeds 1 and 2 gave identical wait histograms: the seed does not reach the arrivals")
	}
	t.Logf("\n%s", a)
}

// at returns the timeline point at second s.
func at(r *Result, s int) Point { return r.Timeline[s-1] }

func TestMakeRunBehaviour(t *testing.T) {
	// make run's profile and target, replayed: what its README says the
	// live system does.
	tr := readRates(t, "makerun.csv")
	cfg := readConfigs(t, "makerun.yaml")[0]
	r, err := Run(&tr, &cfg, Options{Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := at(r, 19).Ready; got != 1 {
		t.Errorf("warm-up: %d ready pods at 19 s, want 1", got)
	}
	// The step at 20 s panics and scales up by the second tick (+1 s for
	// the pods to turn ready).
	up := 0
	for s := 20; s <= 25; s++ {
		up = max(up, int(at(r, s).Replicas))
	}
	if up < 3 {
		t.Errorf("step: at most %d replicas by 25 s, want a panic scale-up to at least 3", up)
	}
	// Scale-down at most halves per tick (max-scale-down-rate 2).
	for s := 62; s < 80; s++ {
		if prev, cur := at(r, s-1).Replicas, at(r, s).Replicas; cur < prev/2 {
			t.Errorf("drop: replicas %d → %d at %d s, more than halving", prev, cur, s)
		}
	}
	// Zero only after a stable window of zeros and the 6 s grace period.
	for s := 80; s < 80+6+6; s++ {
		if at(r, s).Replicas == 0 {
			t.Errorf("replicas 0 at %d s, before a 6 s window and a 6 s grace after the load went at 80 s", s)
			break
		}
	}
	if got := at(r, 110).Replicas; got != 0 {
		t.Errorf("idle: %d replicas at 110 s, want 0", got)
	}
	// The activator's stat brings it back within a tick of the load
	// returning at 115 s.
	back := 0
	for s := 115; s <= 118; s++ {
		back = max(back, int(at(r, s).Replicas))
	}
	if back == 0 {
		t.Error("requests returned at 115 s: still at zero replicas at 118 s")
	}
	if r.ColdStarts != 2 || r.Served != r.Arrived || r.Arrived != tr.Total() {
		t.Errorf("cold starts %d, served %d of %d arrived (trace %d); want 2 and all served", r.ColdStarts, r.Served, r.Arrived, tr.Total())
	}
}

func TestLagConfigurations(t *testing.T) {
	tr := readRates(t, "records.csv")
	cfgs := readConfigs(t, "lag.yaml")
	rs, err := Compare(&tr, cfgs, Options{Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Served != r.Arrived || r.Arrived != tr.Total() {
			t.Errorf("%s: consumed %d of %d produced (trace %d), want all", r.Config, r.Served, r.Arrived, tr.Total())
		}
		peak := int32(0)
		for _, p := range r.Timeline {
			peak = max(peak, p.Replicas)
			if p.Replicas > 4 {
				t.Fatalf("%s: %d replicas at %s, above the 4 partitions", r.Config, p.Replicas, p.At)
			}
		}
		if peak != 4 {
			t.Errorf("%s: peak %d replicas, want the 4 partitions under a 400 records/s batch", r.Config, peak)
		}
		if r.ColdStarts == 0 || r.AtZero == 0 {
			t.Errorf("%s: %d cold starts, %s at zero; want it to idle to zero between batches", r.Config, r.ColdStarts, r.AtZero)
		}
	}
	// A longer idle timeout keeps pods longer: more pod-seconds, less time at zero.
	if short, long := rs[0], rs[1]; !(long.PodSeconds > short.PodSeconds && long.AtZero < short.AtZero) {
		t.Errorf("idle 2m vs 10s: pod-seconds %.0f vs %.0f, at zero %s vs %s; want more pod-seconds and less time at zero",
			long.PodSeconds, short.PodSeconds, long.AtZero, short.AtZero)
	}
}

// compareAzure replays the functions of one Azure 2019 file as tidal-sim
// -azure does.
func compareAzure(t testing.TB, path string, cfgs []Configuration, opts Options, sel AzureOptions) []*Result {
	t.Helper()
	src, closeFiles, err := trace.OpenAzure([]string{path}, trace.ByFunction)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFiles()
	rs, err := CompareSource(src, cfgs, opts, sel)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestCompareAzureSample(t *testing.T) {
	cfgs := readConfigs(t, "configs.yaml")
	rs := compareAzure(t, "testdata/azure-sample.csv", cfgs, Options{Seed: 1}, AzureOptions{})
	for _, r := range rs {
		if r.Targets != 4 || r.Duration != 4*24*time.Hour || r.Served != r.Arrived {
			t.Errorf("%s: %d targets, %s, served %d of %d; want 4 days of 4 functions, all served", r.Config, r.Targets, r.Duration, r.Served, r.Arrived)
		}
	}
	// Keeping pods 5 minutes after the load costs more pod-seconds and
	// saves cold starts.
	if d, k := rs[0], rs[1]; !(k.ColdStarts < d.ColdStarts && k.PodSeconds > d.PodSeconds) {
		t.Errorf("scale-down-delay-5m: %d cold starts, %.0f pod-seconds; defaults %d, %.0f: want fewer cold starts for more pod-seconds",
			k.ColdStarts, k.PodSeconds, d.ColdStarts, d.PodSeconds)
	}
	// One function by its hash prefix, with its timeline.
	one := compareAzure(t, "testdata/azure-sample.csv", cfgs[:1], Options{Seed: 1, Timeline: true}, AzureOptions{Limit: 1})
	if one[0].Targets != 1 || len(one[0].Timeline) != 24*3600 {
		t.Errorf("one function: %d targets, %d timeline points; want 1 and a point a second", one[0].Targets, len(one[0].Timeline))
	}
}

func TestPlot(t *testing.T) {
	tr := readRates(t, "makerun.csv")
	rs, err := Compare(&tr, readConfigs(t, "configs.yaml"), Options{Seed: 1, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.png")
	if err := Plot(path, rs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("plot: %d bytes, %v; want a PNG", len(data), err)
	}
	rs[0].Timeline, rs[1].Timeline = nil, nil
	if err := Plot(path, rs); err == nil || !strings.Contains(err.Error(), "no timeline") {
		t.Fatalf("plot without timelines: %v, want an error saying so", err)
	}
}

func TestLagModes(t *testing.T) {
	// Every lag mode the decider runs replays: every record is consumed and
	// the replicas stay within the partitions (KEDA's cap without
	// allowIdleConsumers, riff's maxReplicas default).
	tr := readRates(t, "records.csv")
	for _, mode := range []struct{ name, yaml string }{
		{"riff-offset", `{lag.tidal.dev/mode: riff-offset}`},
		{"riff-queue", `{lag.tidal.dev/mode: riff-queue}`},
		{"keda", `{lag.tidal.dev/mode: keda, lag.tidal.dev/lagThreshold: "100", lag.tidal.dev/pollingInterval: "15"}`},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cfgs, err := ParseFile([]byte(`configurations: [{name: m, strategy: lag, partitions: 4, annotations: ` + mode.yaml +
				`, pods: {readyDelay: 1s, recordsPerSecond: 40}}]`))
			if err != nil {
				t.Fatal(err)
			}
			r, err := Run(&tr, &cfgs[0], Options{Seed: 1, Timeline: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.Served != tr.Total() {
				t.Errorf("consumed %d of %d", r.Served, tr.Total())
			}
			for _, p := range r.Timeline {
				if p.Replicas > 4 {
					t.Fatalf("%d replicas at %s, above the 4 partitions", p.Replicas, p.At)
				}
			}
			if r.ColdStarts == 0 {
				t.Error("never scaled up from zero")
			}
		})
	}
}
