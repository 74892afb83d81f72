package kedascaler

import (
	"context"
	"testing"
	"time"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	lagstrategy "github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestInlineKEDAStreamIsActive: StreamIsActive of a keda-mode trigger
// sends KEDA's activity of the offsets at once: the total lag, persistent
// lag and uncommitted partitions included, strictly above
// activationLagThreshold, before the cap; the same as tidal's keda mode
// deciding those offsets.
func TestInlineKEDAStreamIsActive(t *testing.T) {
	tests := []struct {
		name    string
		extra   []string
		offsets [][2]int64 // (end, committed), committed -1: none
		want    bool
	}{
		{"lag above activationLagThreshold", nil, [][2]int64{{100, 40}, {30, 30}}, true},
		{"lag at activationLagThreshold: strictly above is active", nil, [][2]int64{{45, 40}, {30, 30}}, false},
		{"caught up", nil, [][2]int64{{3, 3}, {3, 3}}, false},
		{"uncommitted partitions count 1 each (latest)", []string{"activationLagThreshold", "1"}, [][2]int64{{100, -1}, {100, -1}}, true},
		{"uncommitted partitions count their log (earliest)", []string{"offsetResetPolicy", "earliest"}, [][2]int64{{6, -1}, {0, -1}}, true},
		{"uncommitted partitions count 0 (scaleToZeroOnInvalidOffset)", []string{"activationLagThreshold", "1", "scaleToZeroOnInvalidOffset", "true"}, [][2]int64{{100, -1}, {100, -1}}, false},
		{"the lag before the cap", []string{"activationLagThreshold", "50"}, [][2]int64{{60, 0}}, true},
		{"persistent lag is active", []string{"excludePersistentLag", "true"}, [][2]int64{{100, 40}}, true},
		{"no topic: every topic the group reads", []string{"topic", ""}, [][2]int64{{3, 0}, {3, 0}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newInlineFixture(t, testConfig(), nil, nil)
			md := billing(tt.extra...)
			if md["topic"] == "" {
				delete(md, "topic")
			}
			f.reader.set(tt.offsets...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := serve(t, f.s).StreamIsActive(ctx, soRef(md))
			if err != nil {
				t.Fatal(err)
			}
			got, err := recvTimeout(t, st.Recv)
			if err != nil {
				t.Fatalf("StreamIsActive: %v", err)
			}
			params := map[string]string{}
			for k, v := range md {
				if k != "bootstrapServers" && k != "consumerGroup" && k != "scalerAddress" && k != "enableTLS" {
					params[k] = v
				}
			}
			cfg, err := lagconfig.ParseConfig("keda", params)
			if err != nil {
				t.Fatal(err)
			}
			own, err := lagstrategy.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := toInput(&commonv1.MetricSample{PartitionLags: f.reader.parts, PartitionCount: ptr(int32(len(tt.offsets)))})
			if d := own.Decide(&in, f.now); got.GetResult() != tt.want || d.KEDA.Active != tt.want {
				t.Errorf("StreamIsActive sent %v, tidal's keda mode %v; want %v", got.GetResult(), d.KEDA.Active, tt.want)
			}
		})
	}
}

// TestInlineKEDAStreamLeavesPollsAlone: the stream sends when KEDA's
// activity changes and nothing while the offsets cannot be read (it stays
// open); its reads move none of the polls' state, so GetMetrics still
// answers what KEDA's scaler would on its own polls (excludePersistentLag
// compares a commit with the previous GetMetrics', not with the stream's).
func TestInlineKEDAStreamLeavesPollsAlone(t *testing.T) {
	f := newInlineFixture(t, testConfig(), nil, nil)
	md := billing("excludePersistentLag", "true", "allowIdleConsumers", "true")
	f.reader.set([2]int64{100, 40}, [2]int64{30, 30})
	if got, err := f.metrics(t, md); err != nil || got != 60 {
		t.Fatalf("first poll: %v, %v; want 60", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := serve(t, f.s).StreamIsActive(ctx, soRef(md))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvTimeout(t, st.Recv); err != nil || !got.GetResult() {
		t.Fatalf("first message %v, %v; want true", got, err)
	}
	// The commit moves while the stream reads it, twice or more.
	f.reader.set([2]int64{100, 50}, [2]int64{30, 30})
	n := f.reader.count()
	testkit.Eventually(t, 5*time.Second, "two stream reads", func() bool { return f.reader.count() >= n+2 })
	if got, err := f.metrics(t, md); err != nil || got != 50 {
		t.Errorf("poll after the stream's reads: %v, %v; want 50 (the commit moved since the previous poll; 0 had the stream's reads counted as polls)", got, err)
	}
	f.reader.set([2]int64{100, 100}, [2]int64{30, 30})
	if got, err := recvTimeout(t, st.Recv); err != nil || got.GetResult() {
		t.Fatalf("caught up: %v, %v; want false", got, err)
	}
	// A broker that does not answer: nothing is sent, the stream stays.
	f.reader.mu.Lock()
	f.reader.err = context.DeadlineExceeded
	f.reader.mu.Unlock()
	n = f.reader.count()
	testkit.Eventually(t, 5*time.Second, "two failed stream reads", func() bool { return f.reader.count() >= n+2 })
	f.reader.set([2]int64{100, 0}, [2]int64{30, 30})
	f.reader.mu.Lock()
	f.reader.err = nil
	f.reader.mu.Unlock()
	if got, err := recvTimeout(t, st.Recv); err != nil || !got.GetResult() {
		t.Fatalf("after the broker answers again: %v, %v; want true (nothing sent meanwhile)", got, err)
	}
}
