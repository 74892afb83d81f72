package main

import (
	"context"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// knativeSetup installs Knative's CRDs and returns a namespace and a
// client of Knative's objects.
func knativeSetup(t *testing.T, c *cluster.Cluster) (string, *knclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := knativetest.InstallCRDs(ctx, c); err != nil {
		t.Fatal(err)
	}
	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c.Namespace(t), kn
}

// revisionPA is a PodAutoscaler of revision rev as Knative's revision
// reconciler makes one, scaling deployment.
func revisionPA(ns, rev, deployment string) *knautoscaling.PodAutoscaler {
	return &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rev, Labels: map[string]string{knautoscaling.LabelRevision: rev}},
		Spec: knautoscaling.PodAutoscalerSpec{
			ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment},
			ProtocolType:   knautoscaling.ProtocolHTTP1,
		},
	}
}

// TestBinaryMeasuresKnativePodAutoscalers runs the collector with --knative:
// a Knative PodAutoscaler's Revision pods are scraped and the decider gets
// the Deployment's spec and samples.
func TestBinaryMeasuresKnativePodAutoscalers(t *testing.T) {
	c := cluster.Shared(t)
	ns, kn := knativeSetup(t, c)
	dec := testkit.StartDecider(t)
	deciderAddr := dec.Addr
	labels := map[string]string{knautoscaling.LabelRevision: "hello-00001"}
	serveQueueProxies(t, readyPods(t, c, ns, "hello-00001", labels, 2), queuestat.Stat{AverageConcurrentRequests: 4, RequestCount: 1})
	runCollector(t, "--kubeconfig", c.Kubeconfig, "--decider-addr", deciderAddr, "--scrape-interval", "200ms", "--knative")

	if _, err := kn.PodAutoscalers(ns).Create(context.Background(), revisionPA(ns, "hello-00001", "hello-00001-deployment"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if last := waitSamples(t, dec, ns+"/hello-00001-deployment", commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 2, true); last != 8 {
		t.Errorf("scraped concurrency %v, want 2 pods × 4", last)
	}
}

// TestBinaryKnativeActivatorStatsFollowThePodAutoscaler runs the collector
// with --knative and --activator-listen: an activator's stat for a
// revision reaches the decider under the target its PodAutoscaler scales,
// a Deployment not named by Knative's rule, beside its scraped samples.
func TestBinaryKnativeActivatorStatsFollowThePodAutoscaler(t *testing.T) {
	c := cluster.Shared(t)
	ns, kn := knativeSetup(t, c)
	dec := testkit.StartDecider(t)
	deciderAddr := dec.Addr
	labels := map[string]string{knautoscaling.LabelRevision: "shop-00001"}
	serveQueueProxies(t, readyPods(t, c, ns, "shop-00001", labels, 1), queuestat.Stat{AverageConcurrentRequests: 2, RequestCount: 1})
	if _, err := kn.PodAutoscalers(ns).Create(context.Background(), revisionPA(ns, "shop-00001", "shop-v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wsAddr := testkit.FreeAddr(t)
	runCollector(t, "--kubeconfig", c.Kubeconfig, "--decider-addr", deciderAddr, "--scrape-interval", "200ms", "--knative", "--activator-listen", wsAddr)
	key := ns + "/shop-v1"
	waitSamples(t, dec, key, commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 1, true)

	conn := dialActivator(t, wsAddr)
	if err := conn.WriteMessage(websocket.BinaryMessage, activatorFrame(ns, "shop-00001", "activator-0", 3, 1)); err != nil {
		t.Fatal(err)
	}
	if last := waitSamples(t, dec, key, commonv1.SampleSource_SAMPLE_SOURCE_PUSH, 1, true); last != 3 {
		t.Errorf("pushed concurrency %v, want the activator's 3", last)
	}
	if n, _, _ := samples(dec, ns+"/shop-00001-deployment", commonv1.SampleSource_SAMPLE_SOURCE_UNSPECIFIED); n != 0 {
		t.Errorf("%d samples under the naming rule's Deployment, want none", n)
	}
}
