package knative

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// binaries holds tidal's collector, built once per test run from the
// checkout this module replaces tidal with.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

func binDir(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		dir, err := os.MkdirTemp("", "tidal-knative-bin-")
		if err != nil {
			binaries.err = err
			return
		}
		binaries.dir = dir
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "tidal-collector"), "./services/collector")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("build tidal-collector: %w\n%s", err, out)
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.dir
}

// recordingDecider keeps every sample the collector streams to it.
type recordingDecider struct{ *testkit.Decider }

// sample is one streamed measurement of a target.
type sample struct {
	time                  time.Time
	concurrency, requests float64
}

func startDecider(t *testing.T) *recordingDecider {
	t.Helper()
	return &recordingDecider{testkit.StartDecider(t)}
}

// wait returns the target's samples once ok accepts them, or fails after
// within.
func (d *recordingDecider) wait(t *testing.T, key string, within time.Duration, ok func([]sample) bool) []sample {
	t.Helper()
	var got []sample
	testkit.Eventually(t, within, key+"'s samples to satisfy the test", func() bool {
		ms, _ := d.Samples(key)
		got = got[:0]
		for _, s := range ms {
			got = append(got, sample{s.GetTime().AsTime(), s.GetAverageConcurrency(), s.GetRequestCount()})
		}
		return ok(got)
	})
	return got
}

func (d *recordingDecider) targets() int { return d.Targets() }

// collector is the collector binary in push discovery, streaming to dec,
// with the activator endpoint at wsURL.
type collector struct {
	proc  *system.Proc
	wsURL string
}

func startCollector(t *testing.T, dec *recordingDecider, args ...string) *collector {
	t.Helper()
	ws := testkit.FreeAddr(t)
	p, err := system.NewProc("collector", binDir(t), "collector", t.TempDir(),
		append([]string{"--discovery", "push", "--decider-addr", dec.Addr, "--activator-listen", ws, "--log-level", "warn"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return &collector{proc: p, wsURL: "ws://" + ws}
}

// metric reads one series of the collector's /metrics, e.g.
// tidal_collector_activator_stats_total{outcome="recorded"}; 0 when absent.
func (c *collector) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, err := c.proc.Metric(series)
	if err != nil && !errors.Is(err, system.ErrNoSeries) {
		t.Fatal(err)
	}
	return v
}

// waitMetric waits until series reaches want.
func (c *collector) waitMetric(t *testing.T, series string, want float64, within time.Duration) {
	t.Helper()
	var got float64
	testkit.Eventually(t, within, fmt.Sprintf("%s to reach %v", series, want), func() bool {
		got = c.metric(t, series)
		return got == want
	}, func() string {
		return fmt.Sprintf("%s = %v, want %v\n%s", series, got, want, c.proc.LogTail(20))
	})
}

func statsTotal(outcome string) string {
	return fmt.Sprintf("tidal_collector_activator_stats_total{outcome=%q}", outcome)
}

func framesRefused(reason string) string {
	return fmt.Sprintf("tidal_collector_activator_frames_refused_total{reason=%q}", reason)
}
