package chart_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/actuator/knative"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/test/testkit"
)

// wireFrame is one binary websocket message as Knative's activator sends
// it (asmetrics.ToWireStatMessages then Marshal, knative.dev/serving
// v0.50.0 pkg/autoscaler/metrics/stat.proto): WireStatMessages with one
// WireStatMessage{namespace, name, Stat{pod_name, average_concurrent_requests,
// request_count}}.
func wireFrame(ns, revision, pod string, concurrency, requests float64) []byte {
	var stat []byte
	stat = protowire.AppendTag(stat, 1, protowire.BytesType)
	stat = protowire.AppendString(stat, pod)
	stat = protowire.AppendTag(stat, 2, protowire.Fixed64Type)
	stat = protowire.AppendFixed64(stat, math.Float64bits(concurrency))
	stat = protowire.AppendTag(stat, 4, protowire.Fixed64Type)
	stat = protowire.AppendFixed64(stat, math.Float64bits(requests))
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, ns)
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendString(msg, revision)
	msg = protowire.AppendTag(msg, 3, protowire.BytesType)
	msg = protowire.AppendBytes(msg, stat)
	var frame []byte
	frame = protowire.AppendTag(frame, 1, protowire.BytesType)
	return protowire.AppendBytes(frame, msg)
}

// TestKnativeServicesUnderTheirAccounts runs the three services as local
// processes configured exactly as the chart's Knative mode configures its
// pods (their TIDAL_* environment as flags, its ConfigMaps as files, bucket
// Leases in the release namespace), the collector and the actuator each
// with only its own ServiceAccount's token, and the collector's activator
// endpoint on a loopback port in place of the pod's :8080. A PodAutoscaler
// made as Knative's revision reconciler makes it, with
// target-burst-capacity -1 so that no pod is scraped and the activator stays
// in the path (its ServerlessService in Proxy mode), is then scaled by
// activator stats alone, sent over the websocket as Knative's activator
// sends them, once a second: concurrency 50 at a target of 10 (70% of it,
// 7, per pod) is 8 pods, or more should two reports land in one second (a
// second's stats add up, as in Knative's buckets). The actuator creates its ServerlessService and writes its status
// under its token; no log may hold an API server refusal.
func TestKnativeServicesUnderTheirAccounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startKnativeRelease(ctx, t)
	c, wns := r.c, r.wns
	act := r.start(ctx, t, "actuator", "actuator", "", r.args(t, "actuator")...)
	dec := r.start(ctx, t, "decider", "decider", "", append(r.args(t, "decider", "TIDAL_ACTUATOR_ADDR"), "--actuator-addr="+act.GRPCAddr)...)
	wsAddr := testkit.FreeAddr(t)
	r.start(ctx, t, "collector", "collector", "", append(r.args(t, "collector", "TIDAL_DECIDER_SERVICE", "TIDAL_ACTIVATOR_LISTEN"),
		"--decider-addr="+dec.GRPCAddr, "--activator-listen="+wsAddr)...)

	// A Revision's Deployment and PodAutoscaler, as Knative makes them;
	// its ServerlessService, created by the actuator, made Ready as
	// Knative's controller would.
	knativetest.Revision(ctx, t, c, wns, "hello", "hello-deployment", map[string]string{
		"autoscaling.knative.dev/target":                "10",
		"autoscaling.knative.dev/target-burst-capacity": "-1",
	})
	admin, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	poll := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	// Knative's activator: one connection, a frame every second (its
	// reporting period) for the revision with 50 requests in flight.
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+wsAddr+"/", nil)
	if err != nil {
		t.Fatalf("dial the collector's activator endpoint: %v (response %v)", err, resp)
	}
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	defer conn.Close()
	stop := make(chan struct{})
	var sender sync.WaitGroup
	sender.Add(1)
	go func() {
		defer sender.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if err := conn.WriteMessage(websocket.BinaryMessage, wireFrame(wns, "hello", "activator-0", 50, 25)); err != nil {
				t.Errorf("send activator stats: %v", err)
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		close(stop)
		sender.Wait()
	}()

	const want = 8 // ceil(50 / (10 × 70%))
	var last int32 = -1
	poll("the activator's stats to scale the Revision", 90*time.Second, func() bool {
		d, err := c.Client.AppsV1().Deployments(wns).Get(ctx, "hello-deployment", metav1.GetOptions{})
		if err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas != last {
			last = *d.Spec.Replicas
			t.Logf("hello-deployment: %d replicas", last)
		}
		return last >= want
	})
	// Under bucket Leases the status that reports a scale follows it once
	// the changes pause for --status-interval (3 s), at most 9 s after it.
	var got *knautoscaling.PodAutoscaler
	poll("the PodAutoscaler's status to report the scale", 30*time.Second, func() bool {
		var err error
		if got, err = admin.PodAutoscalers(wns).Get(ctx, "hello", metav1.GetOptions{}); err != nil {
			return false
		}
		return got.Status.DesiredScale != nil && *got.Status.DesiredScale >= want && got.Status.Annotations[knative.AnnotationDecision] != ""
	})
	// tidal writes nothing else on Knative's objects: no finalizer, and the
	// PodAutoscaler's metadata is Knative's.
	if len(got.Finalizers) != 0 {
		t.Errorf("PodAutoscaler finalizers %v, want none", got.Finalizers)
	}
	sks, err := admin.ServerlessServices(wns).Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// target-burst-capacity -1 keeps the activator in the path at any
	// scale (Knative's excess burst capacity is then -1): Proxy.
	if sks.Spec.Mode != knnetworking.ModeProxy || len(sks.Finalizers) != 0 || !metav1.IsControlledBy(sks, got) {
		t.Errorf("ServerlessService mode %s finalizers %v owners %v: want Proxy, none, controlled by the PodAutoscaler", sks.Spec.Mode, sks.Finalizers, sks.OwnerReferences)
	}
}
