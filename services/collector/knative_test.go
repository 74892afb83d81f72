package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/pods"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/cluster"
)

// TestBinaryMeasuresKnativePodAutoscalers runs the collector with --knative:
// a Knative PodAutoscaler's Revision pods are scraped and the decider gets
// the Deployment's spec and samples.
func TestBinaryMeasuresKnativePodAutoscalers(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := knativetest.InstallCRDs(ictx, c); err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)

	dec := &recordingDecider{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	deciderv1.RegisterDeciderServiceServer(gs, dec)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	labels := map[string]string{knautoscaling.LabelRevision: "hello-00001"}
	for i := range 2 {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("hello-00001-%d", i), Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "queue-proxy", Image: "example.com/qp"}}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var ready []corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for len(ready) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("pods not ready")
		}
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: knautoscaling.LabelRevision + "=hello-00001"})
		if err != nil {
			t.Fatal(err)
		}
		ready = ready[:0]
		for _, p := range list.Items {
			if pods.Ready(&p) {
				ready = append(ready, p)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	body := queuestat.Marshal(queuestat.Stat{AverageConcurrentRequests: 4, RequestCount: 1})
	for _, p := range ready {
		pl, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, "9090"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", queuestat.ContentType)
			_, _ = w.Write(body)
		})}
		go func() { _ = srv.Serve(pl) }()
		defer srv.Close()
	}

	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(rctx, []string{"--kubeconfig", c.Kubeconfig, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
			"--decider-addr", ln.Addr().String(), "--scrape-interval", "200ms", "--log-level", "error", "--knative"}, io.Discard)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	pa := &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello-00001", Labels: labels},
		Spec: knautoscaling.PodAutoscalerSpec{
			ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello-00001-deployment"},
			ProtocolType:   knautoscaling.ProtocolHTTP1,
		},
	}
	if _, err := kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := ns + "/hello-00001-deployment"
	deadline = time.Now().Add(30 * time.Second)
	for {
		n, spec, last := dec.scraped(key)
		if spec && n >= 2 {
			if last != 8 {
				t.Errorf("scraped concurrency %v, want 2 pods × 4", last)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decider got %d samples (spec %v) for %s within 30s", n, spec, key)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
