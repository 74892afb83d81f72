package lag

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// inTopic names the topic of every partition of ps.
func inTopic(topic string, ps []Partition) []Partition {
	out := make([]Partition, len(ps))
	for i, p := range ps {
		p.Topic = topic
		out[i] = p
	}
	return out
}

// TestKEDASeveralTopics: a group read on several topics (a KEDA trigger
// without a topic) is summed over every partition of every topic, capped
// at all their partitions, as KEDA's getTotalLag does, with
// excludePersistentLag's memory per topic and partition.
func TestKEDASeveralTopics(t *testing.T) {
	two := func(a, b []Partition) []Partition { return append(inTopic("orders", a), inTopic("refunds", b)...) }
	cfg := kedaCfg(true, func(c *lagconfig.Config) { c.Topic, c.LagThreshold = "", 10 })
	ds := polls(t, cfg, two(parts(30, 0, 20, 10), parts(15, 5)))
	if d := ds[0]; d.Status != StatusOK || d.KEDA.Metric != 30 || !d.KEDA.Active || d.TotalLag != 50 || d.PartitionCount != 3 {
		t.Errorf("sum of two topics: %+v; want 50 over 3 partitions, capped at 3 x 10", d)
	}
	if d := polls(t, kedaCfg(true, func(c *lagconfig.Config) { c.Topic, c.LagThreshold = "", 100 }), two(parts(30, 0, 20, 10), parts(15, 5)))[0]; d.KEDA.Metric != 50 {
		t.Errorf("uncapped sum: metric %v; want 50", d.KEDA.Metric)
	}

	// Partition 0 of each topic: the same id, different commits. Only
	// orders' commit stands still between the polls.
	persistent := kedaCfg(true, func(c *lagconfig.Config) { c.Topic, c.LagThreshold, c.ExcludePersistentLag = "", 100, true })
	ds = polls(t, persistent,
		two(parts(30, 10), parts(30, 5)),
		two(parts(40, 10), parts(40, 6)))
	if d := ds[1]; d.TotalLag != 34 || d.TotalLagWithPersistent != 64 {
		t.Errorf("excludePersistentLag per topic: lag %d (with persistent %d); want 34 (orders' 30 persistent) and 64", d.TotalLag, d.TotalLagWithPersistent)
	}
	for _, p := range ds[1].Partitions {
		if p.Topic == "" {
			t.Errorf("partition %+v: the decision names no topic", p)
		}
	}

	// A topic the group leaves is forgotten: back later, its commit is new.
	s, err := New(persistent)
	if err != nil {
		t.Fatal(err)
	}
	for k, in := range [][]Partition{two(parts(30, 10), parts(30, 5)), inTopic("orders", parts(40, 10)), two(parts(40, 10), parts(40, 5))} {
		d := s.Decide(&Input{Partitions: in}, epoch.Add(persistent.TickInterval*time.Duration(k+1)))
		if k == 2 && d.TotalLag != 35 {
			t.Errorf("refunds back with the commit it left with: lag %d; want 35 (orders' 30 persistent, refunds' 35 not: its memory went with it)", d.TotalLag)
		}
	}
	if len(s.prevByTopic) != 2 {
		t.Errorf("%d topics remembered; want 2", len(s.prevByTopic))
	}
}

// TestSeveralTopicsRefused: what cannot be read of several topics holds the
// decision and says why.
func TestSeveralTopicsRefused(t *testing.T) {
	tests := []struct {
		name string
		cfg  lagconfig.Config
		in   []Partition
		want string
	}{
		{"riff reads one topic", func() lagconfig.Config { c := lagconfig.DefaultConfig(lagconfig.ModeRiffQueue); c.Topic = ""; return c }(),
			append(inTopic("a", parts(5, 0)), inTopic("b", parts(5, 0))...), "reads one input topic"},
		{"partitionLimitation names one topic's", kedaCfg(false, func(c *lagconfig.Config) { c.Topic, c.PartitionLimitation = "", []int32{0} }),
			append(inTopic("a", parts(5, 0)), inTopic("b", parts(5, 0))...), "partitionLimitation"},
		{"a topic on some partitions only", kedaCfg(false, nil),
			append(parts(5, 0), inTopic("b", parts(5, 0))[0]), "on every partition or on none"},
		{"no topic on some partitions", kedaCfg(false, nil),
			append(inTopic("b", parts(5, 0)), parts(5, 0)...), "on every partition or on none"},
		{"a partition twice", kedaCfg(false, nil),
			append(inTopic("a", parts(5, 0)), inTopic("a", parts(5, 0))...), "reported twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := polls(t, tt.cfg, tt.in)[0]
			if d.Status != StatusBadInput || !errors.Is(d.Err, ErrBadInput) || !strings.Contains(d.Err.Error(), tt.want) {
				t.Errorf("status %v, error %v; want bad input mentioning %q", d.Status, d.Err, tt.want)
			}
		})
	}
}
