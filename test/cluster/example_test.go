package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/workload"
)

// Example shows a test package using the shared cluster and the simulated
// workload. (It is compiled, not run: it has no Output comment.)
func Example() {
	// In the package's main_test.go:
	//
	//	func TestMain(m *testing.M) { cluster.Main(m) }
	test := func(t *testing.T) {
		c := cluster.Shared(t) // built and started on first use; skipped with -short
		ns := c.Namespace(t)   // this test's namespace, deleted at the end

		// Anything that takes a *rest.Config or a kubeconfig works as on any cluster.
		client := kubernetes.NewForConfigOrDie(c.Config())
		ctx := context.Background()
		if _, err := client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("hello", nil, 3), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		// Every Ready pod of hello now serves a queue-proxy Stat at podIP:9090/metrics.
		w, err := workload.Start(ctx, workload.Options{
			Client: client, Namespace: ns, Deployment: "hello",
			Profile: workload.Steps{{At: 0, Rate: 50}, {At: 30 * time.Second, Rate: 200}},
			Model:   workload.ModelConfig{ContainerConcurrency: 10, ServiceTime: 100 * time.Millisecond, ColdStart: 2 * time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		// ... run the collector against c.Kubeconfig, then:
		fmt.Printf("%+v\n", w.Report())
	}
	_ = test
}
