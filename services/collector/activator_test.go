package main

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
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

// TestActivatorStatsReachTheDecider runs the collector's run with
// --activator-listen in push discovery: a frame sent over the websocket
// becomes a pushed sample of the revision's Deployment in the stream to
// the decider.
func TestActivatorStatsReachTheDecider(t *testing.T) {
	dec := &recordingDecider{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	deciderv1.RegisterDeciderServiceServer(gs, dec)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	wsAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--discovery", "push", "--log-level", "error",
			"--decider-addr", ln.Addr().String(), "--activator-listen", wsAddr}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v", err)
		}
	})
	var conn *websocket.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, resp, err := websocket.DefaultDialer.Dial("ws://"+wsAddr, nil)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("activator endpoint not serving after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.WriteMessage(websocket.BinaryMessage, activatorFrame("shop", "cart-00001", "activator-0", 1, 1)); err != nil {
		t.Fatal(err)
	}
	const key = "shop/cart-00001-deployment"
	for {
		if n, _, last := dec.scraped(key); n > 0 {
			if last != 1 {
				t.Errorf("concurrency = %v, want 1", last)
			}
			return
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("no sample of %s reached the decider", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
