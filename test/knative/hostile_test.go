package knative

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	asmetrics "knative.dev/serving/pkg/autoscaler/metrics"

	"github.com/tidalscale/tidal/test/knative/knactivator"
)

// rawConn is a websocket client that is not Knative's: it sends what a
// hostile caller in the pod network could.
func rawConn(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWith reads until the collector closes the connection.
func closedWith(t *testing.T, c *websocket.Conn) *websocket.CloseError {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read: %v, want a close frame", err)
		}
		return ce
	}
}

// knativeFrame marshals stats for n distinct revisions with Knative's own
// code, as ReportStats does.
func knativeFrame(t *testing.T, prefix string, n int) []byte {
	t.Helper()
	sms := make([]asmetrics.StatMessage, n)
	for i := range sms {
		sms[i] = knactivator.Stat("flood", fmt.Sprintf("%s-%05d", prefix, i), "activator-evil", 1, 1)
	}
	w := asmetrics.ToWireStatMessages(sms)
	b, err := w.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileFramesAreBounded runs the collector binary with a 1 MiB frame
// bound and room for 500 targets, and sends it what a hostile caller
// could: each refusal closes only that connection, the flood of 10,000
// revisions makes 500 targets and no more, and the collector keeps
// serving Knative's activator throughout.
func TestHostileFramesAreBounded(t *testing.T) {
	t.Parallel()
	dec := startDecider(t)
	col := startCollector(t, dec, "--activator-max-frame-bytes", "1048576", "--max-targets", "500")
	good := knactivator.Start(t, col.wsURL, "activator-good")
	good.WaitReady(t, 10*time.Second)

	t.Run("oversized", func(t *testing.T) {
		c := rawConn(t, col.wsURL)
		// The collector closes on the frame's header, before its payload:
		// the write may then fail with a reset, and the close frame may be
		// lost with it. The count says the frame was refused.
		if err := c.WriteMessage(websocket.BinaryMessage, make([]byte, 2<<20)); err == nil {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _, err = c.ReadMessage()
			var ce *websocket.CloseError
			if err == nil || (errors.As(err, &ce) && ce.Code != websocket.CloseMessageTooBig) {
				t.Errorf("read after an oversized frame = %v, want the connection closed (1009)", err)
			}
		}
		col.waitMetric(t, framesRefused("too-big"), 1, 5*time.Second)
	})
	t.Run("garbage", func(t *testing.T) {
		c := rawConn(t, col.wsURL)
		if err := c.WriteMessage(websocket.BinaryMessage, []byte("\x0a\xff\xff\xff\xff\x0fnot a protobuf")); err != nil {
			t.Fatal(err)
		}
		if ce := closedWith(t, c); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "not protobuf") {
			t.Errorf("close = %d %q, want 1008 saying not protobuf", ce.Code, ce.Text)
		}
	})
	t.Run("text", func(t *testing.T) {
		c := rawConn(t, col.wsURL)
		if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if ce := closedWith(t, c); ce.Code != websocket.CloseUnsupportedData {
			t.Errorf("close = %d %q, want 1003", ce.Code, ce.Text)
		}
	})
	t.Run("10,001 revisions in one frame", func(t *testing.T) {
		c := rawConn(t, col.wsURL)
		if err := c.WriteMessage(websocket.BinaryMessage, knativeFrame(t, "over", 10001)); err != nil {
			t.Fatal(err)
		}
		if ce := closedWith(t, c); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "more than 10000 entries") {
			t.Errorf("close = %d %q, want 1008 naming the bound", ce.Code, ce.Text)
		}
	})
	t.Run("10,000 distinct revisions", func(t *testing.T) {
		c := rawConn(t, col.wsURL)
		if err := c.WriteMessage(websocket.BinaryMessage, knativeFrame(t, "rev", 10000)); err != nil {
			t.Fatal(err)
		}
		col.waitMetric(t, statsTotal("recorded"), 500, 10*time.Second)
		col.waitMetric(t, statsTotal("target-limit"), 9500, 10*time.Second)
		// The connection stays: a stat for a target it made is recorded.
		if err := c.WriteMessage(websocket.BinaryMessage, knativeFrame(t, "rev", 1)); err != nil {
			t.Fatal(err)
		}
		col.waitMetric(t, statsTotal("recorded"), 501, 10*time.Second)
		if n := dec.targets(); n > 500 {
			t.Errorf("the decider got %d targets, want at most --max-targets 500", n)
		}
	})
	t.Run("a plain GET", func(t *testing.T) {
		resp, err := http.Get("http" + strings.TrimPrefix(col.wsURL, "ws"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})

	// Knative's activator stayed connected through all of it and is still
	// heard (rev-00000 is one of the 500 targets).
	if err := good.Conn.Status(); err != nil || good.Drops.Load() != 0 {
		t.Fatalf("Knative's activator: status %v, %d drops; want connected throughout", err, good.Drops.Load())
	}
	good.Send(knactivator.Stat("flood", "rev-00000", "activator-good", 4, 4))
	dec.wait(t, "flood/rev-00000-deployment", 10*time.Second, has(func(s sample) bool { return s.concurrency == 4 }))
	if !col.proc.Running() {
		t.Fatal("the collector exited")
	}
}
