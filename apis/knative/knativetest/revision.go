package knativetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/test/cluster"
)

// stepTimeout bounds each step of Revision. It is a liveness bound, not a
// speed claim: in a make test beside two peer suites a PodAutoscaler was
// not Ready within 30 s.
const stepTimeout = 2 * time.Minute

// Revision makes in ns what Knative's revision reconciler makes for a
// Revision called name: its Deployment (deployment, one replica) and its
// PodAutoscaler (HTTP/1, with annotations), both labelled with the
// revision. Then it plays Knative's ServerlessService reconciler for the
// ServerlessService tidal's actuator must create: it names the public and
// private Services (name and name-private) and marks it Ready. It returns
// when the PodAutoscaler is Ready with that private Service as its
// metricsServiceName, and fails t, naming what it saw last, when a step
// takes longer than stepTimeout.
func Revision(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, name, deployment string, annotations map[string]string) {
	t.Helper()
	kn, err := knclient.New(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{knautoscaling.LabelRevision: name}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment(deployment, labels, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pa := &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: knautoscaling.PodAutoscalerSpec{
			ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment},
			ProtocolType:   knautoscaling.ProtocolHTTP1,
		},
	}
	if _, err := kn.PodAutoscalers(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last any
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stepTimeout, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v (last seen: %+v)", what, err, last)
		}
	}
	poll("the actuator to create the ServerlessService", func() bool {
		_, err := kn.ServerlessServices(ns).Get(ctx, name, metav1.GetOptions{})
		last = err
		return err == nil
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := kn.ServerlessServices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Status.ServiceName, s.Status.PrivateServiceName = name, name+"-private"
		s.Status.Set(duck.Condition{Type: knnetworking.ConditionReady, Status: corev1.ConditionTrue}, time.Now())
		_, err = kn.ServerlessServices(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	poll("the PodAutoscaler to be Ready", func() bool {
		got, err := kn.PodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
		if last = err; err == nil {
			last = got.Status
		}
		return err == nil && got.Status.IsTrue(knautoscaling.ConditionReady) && got.Status.MetricsServiceName == name+"-private"
	})
}
