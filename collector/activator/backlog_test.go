package activator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tidalscale/tidal/collector/dispatch"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/gathered"
	"github.com/tidalscale/tidal/test/testkit"
)

// stuckDecider takes Ingest streams and never reads them: once gRPC's
// flow-control windows are full, the collector's sends block, as they do
// to a decider that stopped reading.
type stuckDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
}

func (stuckDecider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	<-st.Context().Done()
	return nil
}

// drainingDecider reads every batch and keeps none.
type drainingDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
}

func (drainingDecider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return st.SendAndClose(&deciderv1.IngestResponse{})
			}
			return err
		}
	}
}

// pinger pings over a connection whose reads run elsewhere and keeps the
// round trips of the pongs.
type pinger struct {
	mu      sync.Mutex
	sent    map[string]time.Time
	worst   time.Duration
	answers int
}

func newPinger(c *websocket.Conn) *pinger {
	p := &pinger{sent: map[string]time.Time{}}
	c.SetPongHandler(func(data string) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if at, ok := p.sent[data]; ok {
			p.worst = max(p.worst, time.Since(at))
			p.answers++
			delete(p.sent, data)
		}
		return nil
	})
	return p
}

func (p *pinger) ping(t *testing.T, c *websocket.Conn, id string) {
	t.Helper()
	p.mu.Lock()
	p.sent[id] = time.Now()
	p.mu.Unlock()
	if err := c.WriteControl(websocket.PingMessage, []byte(id), time.Now().Add(time.Second)); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// outstanding returns the pings not answered yet and the slowest answer.
func (p *pinger) outstanding() (int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent), p.worst
}

// TestBackPressureKeepsTheConnection: a decider stops reading, so its
// backlog fills and overflows, and the collector's stream to it waits to
// replay. An activator connection's frames then wait
// --activator-backlog-wait once and are dropped, counted as "backlog";
// frames keep coming faster than a wait each (as Knative's activator sends
// one a second against the default 2 s), and the connection stays up and
// answers every ping within about one wait; the dropped stats are held
// nowhere (no target made, the heap does not grow with them); once a
// decider has room the next stat is recorded; and nothing the test started
// outlives it.
func TestBackPressureKeepsTheConnection(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	const wait = 300 * time.Millisecond
	cfg := defaults(t, func(c *Config) { c.BacklogWait = wait; c.StatRate = 1e9; c.StatBurst = 1e9 })
	r := startReplicaOn(t, cfg, true, nil, nil, dispatch.Config{Retention: time.Minute, HighWater: 256, Batch: 256, MaxTargets: 10000})
	// Fixed 64 KiB windows: no BDP estimation grows them while nothing is
	// read.
	stuck, stopStuck := testkit.ServeDecider(t, stuckDecider{}, "", grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	// No reconnect within the test: the overflowed stream stays behind.
	streams := dispatch.NewStreams(dispatch.StreamsConfig{CollectorID: "c", FlushInterval: 10 * time.Millisecond, BatchSamples: 256, HighWater: 256,
		MinBackoff: time.Hour, MaxBackoff: time.Hour}, r.hub, zap.NewNop())
	sctx, cancel := context.WithCancel(context.Background())
	streamsDone := make(chan struct{})
	go func() { _ = streams.Run(sctx); close(streamsDone) }()
	stopStreams := sync.OnceFunc(func() { cancel(); <-streamsDone })
	t.Cleanup(stopStreams)
	streams.SetDeciders([]string{stuck})
	testkit.Eventually(t, 10*time.Second, "the stream to the decider open", func() bool { return gathered.Sum(t, r.reg, "tidal_collector_stream_connected", "") == 1 })

	c := dial(t, r.url)
	p := newPinger(c)
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	recorded, backlog := r.metrics.stats.WithLabelValues(outcomeRecorded), r.metrics.stats.WithLabelValues(outcomeBacklog)
	var sent float64
	send := func(names ...string) {
		t.Helper()
		if err := c.WriteMessage(websocket.BinaryMessage, frameOf("shop", wireStat{pod: "activator-0", conc: 1, requests: 1}, names...)); err != nil {
			t.Fatalf("write: %v", err)
		}
		sent += float64(len(names))
	}
	handled := func() bool { return value(recorded)+value(backlog) == sent }

	// 1. Fill the backlog: frames of 1000 revisions, each in a second of
	// its own (the backlog merges a target's pushes within one second).
	fill := make([]string, 1000)
	for i := range fill {
		fill[i] = fmt.Sprintf("fill-%04d", i)
	}
	now := start
	for frames := 0; value(backlog) == 0; frames++ {
		if frames == 50 {
			t.Fatalf("no stat dropped for a full backlog after %d frames of %d stats", frames, len(fill))
		}
		now = now.Add(time.Second)
		at := now
		r.now.Store(&at)
		send(fill...)
		testkit.Eventually(t, 10*time.Second, "the frame handled", handled)
	}
	// Usually the backlog overflowed (the stream waits to replay); a frame
	// ending with the backlog exactly at its bound finds it full as well.
	t.Logf("replays{cause=overflow} = %v", gathered.Sum(t, r.reg, "tidal_collector_stream_replays_total", "overflow"))
	if got := value(backlog); got != float64(len(fill)) {
		t.Errorf("backlog = %v after the first frame that found the backlog full, want its %d stats", got, len(fill))
	}
	kept := value(recorded)

	// 2. Frames keep coming, ten times faster than a wait each, and pings
	// between them: every pong comes within about one wait.
	for i := 0; i < 50; i++ {
		send(fill[:10]...)
		if i%5 == 0 {
			p.ping(t, c, strconv.Itoa(i))
		}
		time.Sleep(wait / 10)
	}
	limit := wait + time.Second
	deadline := time.Now().Add(limit)
	for {
		n, worst := p.outstanding()
		if n == 0 {
			if worst > limit {
				t.Errorf("slowest pong %s after its ping, want within %s", worst, limit)
			}
			break
		}
		select {
		case err := <-readErr:
			t.Fatalf("connection ended while the backlog was full: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pings unanswered %s after the last was sent: frames waiting for the backlog hold up the pongs", n, limit)
		}
	}
	testkit.Eventually(t, 10*time.Second, "every frame handled", handled)
	if value(recorded) != kept || value(backlog) != sent-kept {
		t.Errorf("recorded %v, backlog %v of %v stats; want %v recorded and every later one counted as backlog", value(recorded), value(backlog), sent, kept)
	}

	// 3. A flood while the backlog is full is dropped, not held: no target
	// is made and the heap does not grow with it.
	late := make([]string, 1000)
	for i := range late {
		late[i] = fmt.Sprintf("late-%04d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100 {
		send(late...)
	}
	testkit.Eventually(t, 10*time.Second, "the flood handled", handled)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("heap grew by %d bytes over a flood of 100,000 dropped stats, want under 4 MiB", grew)
	}
	if got := gathered.Sum(t, r.reg, "tidal_collector_targets", ""); got != float64(len(fill)) {
		t.Errorf("targets = %v after the flood, want %d: dropped stats made targets", got, len(fill))
	}
	if r.hub.Known(deployment(late[0])) {
		t.Error("a dropped stat's target exists")
	}

	// 4. A decider with room takes over: the next stat is recorded.
	healthy, stopHealthy := testkit.ServeDecider(t, drainingDecider{}, "")
	streams.SetDeciders([]string{healthy})
	send("back-00001")
	testkit.Eventually(t, 10*time.Second, "the stat after the backlog cleared handled", handled)
	if !r.hub.Known(deployment("back-00001")) {
		t.Error("a stat sent once a decider had room was not recorded")
	}
	p.ping(t, c, "last")
	testkit.Eventually(t, 10*time.Second, "the last pong", func() bool { n, _ := p.outstanding(); return n == 0 })
	if got := value(r.metrics.connections); got != 1 {
		t.Errorf("connections = %v, want the activator's one throughout", got)
	}
	select {
	case err := <-readErr:
		t.Fatalf("connection ended: %v", err)
	default:
	}

	// Nothing outlives the test.
	_ = c.Close()
	<-readErr
	stopStreams()
	stopStuck()
	stopHealthy()
	r.stop()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines back to %d", goroutines), func() bool { return runtime.NumGoroutine() <= goroutines })
}
