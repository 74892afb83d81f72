package main

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/encoding/protowire"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// activatorFrame writes one WireStatMessages of Knative's (stat.proto,
// knative.dev/serving v0.50.0) with one message: namespace, name, and a
// Stat with pod_name, average_concurrent_requests and request_count.
func activatorFrame(ns, name, pod string, concurrency, requests float64) []byte {
	var st []byte
	st = protowire.AppendTag(st, 1, protowire.BytesType)
	st = protowire.AppendString(st, pod)
	st = protowire.AppendTag(st, 2, protowire.Fixed64Type)
	st = protowire.AppendFixed64(st, math.Float64bits(concurrency))
	st = protowire.AppendTag(st, 4, protowire.Fixed64Type)
	st = protowire.AppendFixed64(st, math.Float64bits(requests))
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, ns)
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendString(m, name)
	m = protowire.AppendTag(m, 3, protowire.BytesType)
	m = protowire.AppendBytes(m, st)
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), m)
}

// dialActivator dials the activator endpoint at addr, retrying for 10 s
// while the collector starts, and closes the connection when the test
// ends.
func dialActivator(t *testing.T, addr string) *websocket.Conn {
	t.Helper()
	var c *websocket.Conn
	testkit.Eventually(t, 10*time.Second, "the activator endpoint serving", func() bool {
		var resp *http.Response
		var err error
		c, resp, err = websocket.DefaultDialer.Dial("ws://"+addr, nil)
		if resp != nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestActivatorStatsReachTheDecider runs the collector's run with
// --activator-listen in push discovery: a frame sent over the websocket
// becomes a pushed sample of the revision's Deployment in the stream to
// the decider.
func TestActivatorStatsReachTheDecider(t *testing.T) {
	dec := testkit.StartDecider(t)
	deciderAddr := dec.Addr
	wsAddr := testkit.FreeAddr(t)
	runCollector(t, "--discovery", "push", "--decider-addr", deciderAddr, "--activator-listen", wsAddr)
	conn := dialActivator(t, wsAddr)
	if err := conn.WriteMessage(websocket.BinaryMessage, activatorFrame("shop", "cart-00001", "activator-0", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if last := waitSamples(t, dec, "shop/cart-00001-deployment", commonv1.SampleSource_SAMPLE_SOURCE_PUSH, 1, false); last != 1 {
		t.Errorf("concurrency = %v, want 1", last)
	}
}
