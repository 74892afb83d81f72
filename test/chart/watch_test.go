package chart_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
	"github.com/tidalscale/tidal/test/workload"
)

// TestWatchNamespaces installs the chart with watchNamespaces listing two
// namespaces and runs the services under the chart's accounts, as the chart
// configures them: the collector's and the actuator's rights are Roles in
// those two namespaces (no ClusterRole at all), their informers sync on
// them, a load in the second namespace scales its Deployment, and a
// PodAutoscaler of a third namespace is neither measured nor scaled. No
// log shows a refusal by the API server.
func TestWatchNamespaces(t *testing.T) {
	c := cluster.Shared(t)
	a, b, other := c.Namespace(t), c.Namespace(t), c.Namespace(t)
	acc := rel.ForTest(t, c, "watchNamespaces={"+a+","+b+"}")
	for _, o := range acc.Objects {
		kind, comp := o.GetKind(), o.GetLabels()["app.kubernetes.io/component"]
		if (kind == "ClusterRole" || kind == "ClusterRoleBinding") && (comp == "collector" || comp == "actuator") {
			t.Errorf("%s %s rendered with watchNamespaces; want Roles in the watched namespaces only", kind, o.GetName())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args, err := acc.SystemArgs(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	watched := "--namespaces=" + a + "," + b
	args["collector"] = append(args["collector"], watched)
	args["actuator"] = append(args["actuator"], watched)
	s, err := system.Start(ctx, system.Options{BinDir: systemBinaries(t), Cluster: c, Args: args, Log: testLog{t},
		AutoscalerConfig: map[string]string{"scale-to-zero-grace-period": "6s"}})
	if err != nil {
		t.Fatalf("start system: %v", err)
	}
	defer func() {
		for name, text := range readLogs(t, s.LogDir) {
			for _, line := range strings.Split(text, "\n") {
				if refusedLine(line) {
					t.Errorf("%s was refused by the API server: %s", name, line)
					break
				}
			}
		}
		if t.Failed() {
			for _, p := range s.Procs() {
				testkit.KeepLog(t, p.Name, p.LogTail(1<<20))
			}
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop system: %v", err)
		}
	}()

	// The unwatched namespace's workload, with a PodAutoscaler, one pod.
	tidal := tidalclient.NewForConfigOrDie(c.Config())
	if _, err := c.Client.AppsV1().Deployments(other).Create(ctx, cluster.Deployment("outside", nil, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(other).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "outside"},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "outside"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	load := system.NewDial(300) // concurrency 30 at 100ms a request
	k, err := s.StartKPA(ctx, system.KPAOptions{
		Namespace: b, Name: "web", Replicas: 1, Profile: load,
		Annotations: map[string]string{
			"autoscaling.knative.dev/window":                        "6s",
			"autoscaling.knative.dev/target":                        "10",
			"autoscaling.knative.dev/target-utilization-percentage": "70",
		},
		Model: workload.ModelConfig{ServiceTime: 100 * time.Millisecond, ColdStart: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	want := int32(math.Ceil(300 * 0.1 / 7))
	var last int32
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(b).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Spec.Replicas == nil {
			return false, nil //nolint:nilerr // created a moment ago
		}
		last = *d.Spec.Replicas
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("%s/web at %d replicas, want %d: %v", b, last, want, err)
	}
	// By now the collector has listed every watched PodAutoscaler many
	// times over: the unwatched one is no target, and its Deployment is
	// as it was, with no status written on its PodAutoscaler.
	conn, err := s.Collectors[0].Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := collectorv1.NewCollectorServiceClient(conn).ListTargets(ctx, &collectorv1.ListTargetsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetTargets()) == 0 {
		t.Error("the collector lists no target; want the watched namespace's")
	}
	for _, tg := range list.GetTargets() {
		if tg.GetTarget().GetNamespace() == other {
			t.Errorf("the collector measures %s, in a namespace it does not watch", tg.GetTarget().Key())
		}
	}
	d, err := c.Client.AppsV1().Deployments(other).Get(ctx, "outside", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("%s/outside: %v, %v; want 1 replica, untouched", other, d.Spec.Replicas, err)
	}
	pa, err := tidal.AutoscalingV1alpha1().PodAutoscalers(other).Get(ctx, "outside", metav1.GetOptions{})
	if err != nil || pa.Status.DesiredScale != nil || pa.Status.LastDecision != nil {
		t.Errorf("%s/outside's PodAutoscaler status %+v, %v; want none written", other, pa.Status, err)
	}
}
