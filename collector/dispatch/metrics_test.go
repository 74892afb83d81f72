package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidalscale/tidal/test/gathered"
	"github.com/tidalscale/tidal/test/testkit"
)

// deciderSeries lists the metric families that hold a series labelled
// decider=addr.
func deciderSeries(t testing.TB, reg *prometheus.Registry, addr string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "decider" && l.GetValue() == addr {
					out = append(out, mf.GetName())
				}
			}
		}
	}
	return out
}

// TestDeciderSeriesDeletedWhenItLeaves: a decider that leaves the member
// set (a decider pod restarted under a new IP) takes its series with it, so
// the collector's series do not grow with every restart; a decider that
// stays keeps its own.
func TestDeciderSeriesDeletedWhenItLeaves(t *testing.T) {
	gone, stays := startDecider(t, ""), startDecider(t, "")
	c := startCollector(t, testConfig(t), time.Minute, gone.addr, stays.addr)
	// Targets until each decider owns one: ownership hashes the deciders'
	// addresses, whose ports differ from run to run, and a fixed six
	// targets all fell to one of them once in 32 runs.
	owners := map[string]bool{}
	for i := 0; len(owners) < 2; i++ {
		n := fmt.Sprintf("t%d", i)
		c.hub.SetSpec(spec(n), 0)
		c.hub.Record(ref(n), scrapeSample(time.Now().Add(-time.Second), 1, 1))
		c.hub.mu.Lock()
		owners[c.hub.targets[keyOf(ref(n))].owner] = true
		c.hub.mu.Unlock()
	}
	testkit.Eventually(t, 10*time.Second, "both deciders connected and fed", func() bool {
		return gathered.Sum(t, c.reg, "tidal_collector_stream_samples_sent_total", gone.addr) > 0 &&
			gathered.Sum(t, c.reg, "tidal_collector_stream_samples_sent_total", stays.addr) > 0
	})
	// A failure is counted too, so every kind of series exists for it.
	gone.stop()
	testkit.Eventually(t, 10*time.Second, "the failure counted", func() bool {
		return gathered.Sum(t, c.reg, "tidal_collector_stream_failures_total", gone.addr) > 0
	})
	if got := deciderSeries(t, c.reg, gone.addr); len(got) == 0 {
		t.Fatalf("no series labelled decider=%s before it left", gone.addr)
	}

	c.streams.SetDeciders([]string{stays.addr})
	testkit.Eventually(t, 5*time.Second, "no series labelled decider="+gone.addr+" after it left",
		func() bool { return len(deciderSeries(t, c.reg, gone.addr)) == 0 },
		func() string { return fmt.Sprint(deciderSeries(t, c.reg, gone.addr)) })
	if got := deciderSeries(t, c.reg, stays.addr); len(got) == 0 {
		t.Errorf("no series labelled decider=%s, which stayed", stays.addr)
	}
}
