package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/collector/queuestat"
	"github.com/tidalscale/tidal/pods"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func TestRunRefusesBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--discovery", "magic"}, "--discovery"},
		{[]string{"--decider-addr", "nope"}, "want host:port"},
		{[]string{"--decider-addr", "127.0.0.1:1", "--decider-dns", "x:1"}, "want one of them"},
		{[]string{"--decider-service", "bad"}, "--decider-service"},
		{[]string{"--history", "1s"}, "--history"},
		{[]string{"--scrape-timeout", "0s"}, "--scrape-timeout"},
		{[]string{"--stream-batch-samples", "0"}, "--stream-batch-samples"},
		{[]string{"--lag-tick", "0s"}, "--lag-tick"},
		{[]string{"--keda-max-streams-per-caller", "0"}, "--keda-max-streams-per-caller"},
		{[]string{"--keda-call-timeout", "0s"}, "--keda-call-timeout"},
		{[]string{"--activator-max-messages", "0"}, "--activator-max-messages"},
		{[]string{"--activator-backlog-wait", "10s"}, "--activator-backlog-wait"},
		{[]string{"--activator-allowed-cidrs", "10.0.0.0"}, "activator-allowed-cidrs"},
		{[]string{"--buckets", "4"}, "--buckets: needs Kubernetes"},
		{[]string{"--discovery", "kubernetes", "--kubeconfig", "/nonexistent", "--buckets", "4", "--lease-duration", "1s"}, "--lease-duration"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tt.args...), &stderr)
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tt.want) {
				t.Errorf("run = %v (stderr %q), want an error naming %s", err, stderr.String(), tt.want)
			}
		})
	}
}

// samples counts the samples of source the decider got for key (any source
// when it is unspecified), says whether its spec came, and returns the last
// one's concurrency.
func samples(d *testkit.Decider, key string, source commonv1.SampleSource) (n int, spec bool, last float64) {
	got, spec := d.Samples(key)
	for _, s := range got {
		if source == commonv1.SampleSource_SAMPLE_SOURCE_UNSPECIFIED || s.GetSource() == source {
			n++
			last = s.GetAverageConcurrency()
		}
	}
	return n, spec, last
}

// waitSamples waits up to 30 s for at least n samples of source for key
// (and its spec, when spec is set) and returns the last one's
// concurrency.
func waitSamples(t *testing.T, d *testkit.Decider, key string, source commonv1.SampleSource, n int, spec bool) float64 {
	t.Helper()
	var last float64
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("%d samples of %s (source %s, spec %v) at the decider", n, key, source, spec), func() bool {
		got, gotSpec, l := samples(d, key, source)
		last = l
		return got >= n && (gotSpec || !spec)
	})
	return last
}

// runCollector runs the collector's run in-process until the test ends,
// when run's error fails the test, and returns its gRPC address. args
// come after the defaults (free loopback ports, --log-level error) and
// override them.
func runCollector(t *testing.T, args ...string) string {
	t.Helper()
	grpcAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--log-level", "error"}, args...), io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return grpcAddr
}

// createKPA creates PodAutoscaler ns/name of the KPA strategy scaling
// Deployment deployment.
func createKPA(t *testing.T, tidal tidalclient.Interface, ns, name, deployment string) {
	t.Helper()
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment},
			Strategy:       autoscalingv1alpha1.StrategyKPA,
		},
	}
	if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(context.Background(), pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readyPods creates n pods labelled labels in ns, named prefix-0 to
// prefix-(n-1), and waits until kwok has them Ready.
func readyPods(t *testing.T, c *cluster.Cluster, ns, prefix string, labels map[string]string, n int) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i), Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/" + prefix}}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var ready []corev1.Pod
	testkit.Eventually(t, time.Minute, fmt.Sprintf("%d pods ready", n), func() bool {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelsSelector(labels)})
		if err != nil {
			t.Fatal(err)
		}
		ready = ready[:0]
		for _, p := range list.Items {
			if pods.Ready(&p) {
				ready = append(ready, p)
			}
		}
		return len(ready) >= n
	})
	return ready
}

func labelsSelector(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

// serveQueueProxies serves s as queue-proxy's protobuf Stat at port 9090
// of each pod's IP, a simulated queue-proxy, until the test ends.
func serveQueueProxies(t *testing.T, ps []corev1.Pod, s queuestat.Stat) {
	t.Helper()
	body := queuestat.Marshal(s)
	for _, p := range ps {
		pl, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, "9090"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", queuestat.ContentType)
			_, _ = w.Write(body)
		})}
		go func() { _ = srv.Serve(pl) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
}

// TestBinaryScrapesKubernetesTargets runs the collector binary's run in
// kubernetes mode against the test cluster: a PodAutoscaler, its Metric and
// three pods serving queue-proxy Stats at their pod IPs are found through
// informers, scraped, and streamed to a decider on loopback.
func TestBinaryScrapesKubernetesTargets(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	dec := testkit.StartDecider(t)
	deciderAddr := dec.Addr
	serveQueueProxies(t, readyPods(t, c, ns, "web", map[string]string{"app": "web"}, 3), queuestat.Stat{AverageConcurrentRequests: 5, RequestCount: 2})
	httpAddr := testkit.FreeAddr(t)
	grpcAddr := runCollector(t, "--kubeconfig", c.Kubeconfig, "--http-addr", httpAddr, "--decider-addr", deciderAddr, "--scrape-interval", "200ms")

	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: autoscalingv1alpha1.MetricSpec{StableWindow: metav1.Duration{Duration: time.Minute}, ScrapeTarget: "web",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	createKPA(t, tidal, ns, "web", "web")
	if _, err := tidal.AutoscalingV1alpha1().Metrics(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if last := waitSamples(t, dec, ns+"/web", commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, 3, true); last != 15 {
		t.Errorf("scraped concurrency %v, want 3 pods × 5", last)
	}

	// The operator's view: GetWindow names the ready pods; /metrics has the
	// collector's series.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := collectorv1.NewCollectorServiceClient(conn).GetWindow(ctx, &collectorv1.GetWindowRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "web"}})
	if err != nil || len(w.GetReadyPods()) != 3 || len(w.GetSamples()) == 0 {
		t.Errorf("GetWindow = %v, %v; want 3 ready pods and samples", w, err)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, series := range []string{"tidal_collector_scrape_duration_seconds", "tidal_collector_pods_scraped_total", "tidal_collector_scrape_failures_total",
		"tidal_collector_targets", "tidal_collector_lag_fetch_duration_seconds", "tidal_collector_stream_queue_depth", "tidal_collector_stream_replays_total"} {
		if !strings.Contains(string(text), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestRunStopsEverythingWhenAComponentFails: the decider Service is missing,
// so finding the deciders fails. One failure stops the process: run returns
// the error only once the server it started has stopped and freed its ports.
func TestRunStopsEverythingWhenAComponentFails(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	grpcAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"--kubeconfig", c.Kubeconfig, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
			"--decider-service", ns + "/missing:9002", "--log-level", "error"}, io.Discard)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "decider service") {
			t.Fatalf("run = %v, want the missing decider Service's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run still running a minute after its decider Service was found missing")
	}
	for _, addr := range []string{grpcAddr, httpAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still taken after run returned: %v", addr, err)
			continue
		}
		_ = ln.Close()
	}
}
