package targets

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// lagObjects is a lag PodAutoscaler scaling Deployment target and the
// Metric the actuator writes for it.
func lagObjects(ns, name, target string, lag *autoscalingv1alpha1.LagSource) (*autoscalingv1alpha1.PodAutoscaler, *autoscalingv1alpha1.Metric) {
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			Strategy:       autoscalingv1alpha1.StrategyLag,
			Lag:            lag,
		},
	}
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       autoscalingv1alpha1.MetricSpec{StableWindow: metav1.Duration{Duration: time.Minute}, Lag: lag.DeepCopy()},
	}
	return pa, m
}

// TestFunctionMeasuredThroughOneSource: a Function is named by its own
// watch and by the lag PodAutoscaler the actuator's deployer creates for it
// (controlled by the Function, without its annotations), and a user may
// write a PodAutoscaler of their own for the Function's Deployment. Each
// names the same target. One source measures it at a time: the user's
// PodAutoscaler when there is one, else the Function; the deployer's
// PodAutoscaler never. Adding or removing a source that does not measure
// the target leaves it alone, and a handover keeps its history.
func TestFunctionMeasuredThroughOneSource(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := kfake.MustCluster(kfake.NumBrokers(1))
	defer k.Close()
	seedKafka(t, k, "orders", 3)
	r := startReplica(t, c, Config{KafkaBrokers: k.ListenAddrs()}, nil)
	ctx := context.Background()
	ref := &commonv1.TargetRef{Namespace: ns, Name: "square", ApiVersion: "apps/v1", Kind: "Deployment"}
	ann := func() map[string]string {
		w, _ := r.hub.Get(ref)
		return w.Spec.GetAnnotations()
	}
	// settled waits until every PodAutoscaler and Metric event so far has
	// been handled: the queue is FIFO, one worker drains it, and each
	// informer delivers in order, so a new marker's target appearing means
	// the events before it were synced.
	markers := 0
	settled := func() {
		t.Helper()
		markers++
		name := fmt.Sprintf("marker-%d", markers)
		pa, m := kpaObjects(ns, name, nil)
		m.Spec.Selector, m.Spec.ScrapeTarget = nil, ""
		createKPA(t, tidal, pa, m)
		mref := &commonv1.TargetRef{Namespace: ns, Name: pa.Spec.ScaleTargetRef.Name}
		testkit.Eventually(t, 30*time.Second, name, func() bool { return r.hub.Known(mref) })
	}

	fn := &functionsv1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "square", Annotations: map[string]string{"lag.tidal.dev/lagForMax": "20"}},
		Spec:       functionsv1alpha1.FunctionSpec{Container: corev1.Container{Image: "example.com/square"}, Input: "orders", LagMode: functionsv1alpha1.LagModeRiff},
	}
	fn, err = tidal.FunctionsV1alpha1().Functions(ns).Create(ctx, fn, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the Function's target with its annotation", func() bool {
		return ann()["lag.tidal.dev/lagForMax"] == "20"
	})
	r.fetcher.FetchNow(ctx)
	if w, _ := r.hub.Get(ref); len(measured(w)) != 1 {
		t.Fatalf("samples %v error %q; want one lag sample", measured(w), w.Error)
	}

	// The deployer's PodAutoscaler, as actuator/deployer writes it.
	dpa, dm := lagObjects(ns, "square", "square", &autoscalingv1alpha1.LagSource{
		Brokers: k.ListenAddrs(), Topic: "orders", ConsumerGroup: "square", Mode: autoscalingv1alpha1.LagModeRiff,
	})
	dpa.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(fn, functionsv1alpha1.SchemeGroupVersion.WithKind("Function"))}
	createKPA(t, tidal, dpa, dm)
	settled()
	if got := ann()["lag.tidal.dev/lagForMax"]; got != "20" {
		t.Errorf("with the deployer's PodAutoscaler: lagForMax = %q, want the Function's 20 (spec %v)", got, ann())
	}

	// A PodAutoscaler of the user's own for the Function's Deployment wins.
	upa, um := lagObjects(ns, "square-keda", "square", &autoscalingv1alpha1.LagSource{
		Brokers: k.ListenAddrs(), Topic: "orders", ConsumerGroup: "square", Mode: autoscalingv1alpha1.LagModeKEDA,
		KEDA: &autoscalingv1alpha1.KEDALagParameters{LagThreshold: 7},
	})
	createKPA(t, tidal, upa, um)
	testkit.Eventually(t, 30*time.Second, "the user's PodAutoscaler measuring the target", func() bool {
		return ann()["lag.tidal.dev/lagThreshold"] == "7"
	})
	// The Function changes: the user's PodAutoscaler still measures it.
	fn.Annotations["lag.tidal.dev/lagForMax"] = "30"
	if _, err := tidal.FunctionsV1alpha1().Functions(ns).Update(ctx, fn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Once the informer holds the change, a Resync queues every source,
	// and a marker queued after them settles them.
	testkit.Eventually(t, 30*time.Second, "the changed Function in the cache", func() bool {
		got, err := r.disc.functions.Functions(ns).Get("square")
		return err == nil && got.Annotations["lag.tidal.dev/lagForMax"] == "30"
	})
	r.disc.Resync()
	settled()
	if a := ann(); a["lag.tidal.dev/mode"] != "keda" || a["lag.tidal.dev/lagThreshold"] != "7" {
		t.Errorf("after the Function changed: spec %v, want the user's PodAutoscaler's (keda, lagThreshold 7)", a)
	}

	// The user's PodAutoscaler goes: the Function measures the target
	// again, which kept its history.
	if err := tidal.AutoscalingV1alpha1().Metrics(ns).Delete(ctx, "square-keda", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the Function measuring the target again", func() bool {
		return ann()["lag.tidal.dev/lagForMax"] == "30" && ann()["lag.tidal.dev/mode"] == "riff-queue"
	})
	if w, ok := r.hub.Get(ref); !ok || len(measured(w)) != 1 {
		t.Errorf("after the handover: known %v, samples %v; want the target with its history", ok, measured(w))
	}

	// The deployer's PodAutoscaler goes: the Function's target stays.
	if err := tidal.AutoscalingV1alpha1().Metrics(ns).Delete(ctx, "square", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Delete(ctx, "square", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	settled()
	r.fetcher.FetchNow(ctx)
	w, ok := r.hub.Get(ref)
	if !ok || len(measured(w)) != 2 || w.Error != "" {
		t.Errorf("after the deployer's PodAutoscaler went: known %v, samples %v, error %q; want the target still measured", ok, measured(w), w.Error)
	}

	// The Function goes: so does its target.
	if err := tidal.FunctionsV1alpha1().Functions(ns).Delete(ctx, "square", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the target removed", func() bool { return !r.hub.Known(ref) })
}
