package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// ingestTargets gives the decider n KPA targets in namespace ns, named
// prefix and a number, each with two samples of load, so each gets a
// decision at the next tick.
func ingestTargets(t *testing.T, client deciderv1.DeciderServiceClient, ns, prefix string, n int) {
	t.Helper()
	st, err := client.Ingest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	req := &deciderv1.IngestRequest{CollectorId: "c1"}
	for i := range n {
		ref := &commonv1.TargetRef{Namespace: ns, Name: fmt.Sprintf("%s%04d", prefix, i)}
		req.Specs = append(req.Specs, &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA})
		req.Metrics = append(req.Metrics, &deciderv1.TargetMetrics{Target: ref, Samples: []*commonv1.MetricSample{
			sample(now.Add(-2*time.Second), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, float64(100+i)),
			sample(now.Add(-time.Second), commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, float64(100+i)),
		}})
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

func TestListDecisionsPages(t *testing.T) {
	client, _ := startDecider(t)
	ctx := context.Background()
	ingestTargets(t, client, "pages", "t", 7)
	ingestTargets(t, client, "other", "t", 2)

	// The index may be up to a second older than the targets.
	var names []string
	testkit.Eventually(t, 5*time.Second, "pages of 3 listing the 7 targets of the namespace", func() bool {
		names = nil
		req := &deciderv1.ListDecisionsRequest{Namespace: "pages", PageSize: 3}
		for pages := 1; ; pages++ {
			resp, err := client.ListDecisions(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetDecisions()) > 3 {
				t.Fatalf("page of %d, want at most 3", len(resp.GetDecisions()))
			}
			for _, d := range resp.GetDecisions() {
				names = append(names, d.GetTarget().GetName())
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			if pages > 7 {
				t.Fatal("paging does not end")
			}
			req.PageToken = resp.GetNextPageToken()
		}
		return len(names) == 7
	})
	for i, n := range names {
		if want := fmt.Sprintf("t%04d", i); n != want {
			t.Errorf("decision %d is for %s, want %s (in key order, each once)", i, n, want)
		}
	}

	for _, tt := range []struct {
		name  string
		req   *deciderv1.ListDecisionsRequest
		field string
	}{
		{"negative page size", &deciderv1.ListDecisionsRequest{PageSize: -1}, "page_size"},
		{"token not base64", &deciderv1.ListDecisionsRequest{PageToken: "not a token!"}, "page_token"},
		{"token too long", &deciderv1.ListDecisionsRequest{PageToken: strings.Repeat("A", 4096)}, "page_token"},
	} {
		_, err := client.ListDecisions(ctx, tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.field) || len(err.Error()) > 400 {
			t.Errorf("%s: %v, want a short InvalidArgument naming %s", tt.name, err, tt.field)
		}
	}
}

// TestSilentWatchStreamsDoNotDelayDecisions: streams that never read fill
// their flow-control windows and stop, and the hub drops them; a stream
// that reads still gets each new decision at its tick.
func TestSilentWatchStreamsDoNotDelayDecisions(t *testing.T) {
	const silent = 30
	client, _ := startDecider(t, "--watch-buffer", "8", "--watch-max-streams", fmt.Sprint(silent+1), "--watch-max-streams-per-caller", fmt.Sprint(silent+1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Enough targets that one tick's decisions pass every flow-control
	// window and buffer of a stream that never reads.
	ingestTargets(t, client, "load", "t", 2000)
	ingestTargets(t, client, "probe", "first", 1)
	// Each stream is subscribed once its first decision arrives.
	var quiet []deciderv1.DeciderService_WatchDecisionsClient
	for range silent {
		w, err := client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
		quiet = append(quiet, w)
	}
	reader, err := client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: "probe"})
	if err == nil {
		_, err = reader.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	// within runs recv, which blocks on a stream, and fails the test unless
	// it returns within 30 s.
	within := func(what string, recv func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- recv() }() // ends with the streams' context at the latest
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not within 30 s", what)
			return nil
		}
	}
	// seen reads the reading stream until the decision for target name,
	// and returns when it arrived.
	seen := func(name string) time.Time {
		t.Helper()
		var at time.Time
		err := within("the reading stream's decision for "+name, func() error {
			for {
				d, err := reader.Recv()
				if err != nil {
					return err
				}
				if d.GetDecision().GetTarget().GetName() == name {
					at = time.Now()
					return nil
				}
			}
		})
		if err != nil {
			t.Fatalf("the reading stream ended: %v", err)
		}
		return at
	}
	// Let two ticks pass so the silent streams fall behind and are dropped.
	time.Sleep(5 * time.Second)
	start := time.Now()
	ingestTargets(t, client, "probe", "new", 1)
	// A tick is 2 s, plus the 500 ms it waits for late samples.
	if took := seen("new0000").Sub(start); took > 4*time.Second {
		t.Errorf("a new target's decision reached the reading stream after %s, want within one tick", took)
	}

	// A tick of 2,000 new decisions, more than any window and buffer holds,
	// then a probe: once the reading stream has the probe's decision, that
	// tick was published and every silent stream has fallen behind, however
	// the ticks before fell (on a busy machine the streams above may have
	// subscribed after the first tick's decisions, and the ticks after it
	// change few).
	ingestTargets(t, client, "load", "more", 2000)
	ingestTargets(t, client, "probe", "second", 1)
	seen("second0000")

	// A silent stream that starts reading finds it was dropped as too slow.
	got := within("a silent stream's end", func() error {
		for {
			if _, err := quiet[0].Recv(); err != nil {
				return err
			}
		}
	})
	if status.Code(got) != codes.ResourceExhausted || !strings.Contains(got.Error(), "too slow") {
		t.Errorf("a silent stream ends with %v, want ResourceExhausted: too slow", got)
	}
}

// TestWatchStreamLimits: one stream more than a caller's bound, or the
// decider's, is refused; callers are told apart by their address.
func TestWatchStreamLimits(t *testing.T) {
	client, _, addr := startDeciderAt(t, "--watch-max-streams", "3", "--watch-max-streams-per-caller", "2")
	ingestTargets(t, client, "ns", "t", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// from dials the decider from a loopback address of its own: a caller.
	from := func(local string) deciderv1.DeciderServiceClient {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return deciderv1.NewDeciderServiceClient(conn)
	}
	// watch opens a stream and returns once it was admitted (its first
	// decision arrived) or refused.
	watch := func(c deciderv1.DeciderServiceClient) error {
		w, err := c.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	a, b, c := from("127.0.0.1"), from("127.0.0.2"), from("127.0.0.3")
	for i, tt := range []struct {
		client deciderv1.DeciderServiceClient
		code   codes.Code
	}{
		{a, codes.OK},
		{a, codes.OK},
		{a, codes.ResourceExhausted}, // the caller's third
		{b, codes.OK},
		{c, codes.ResourceExhausted}, // the decider's fourth
	} {
		if err := watch(tt.client); status.Code(err) != tt.code {
			t.Errorf("stream %d: %v, want %s", i, err, tt.code)
		}
	}
}
