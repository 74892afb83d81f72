package deployer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalscheme "github.com/tidalscale/tidal/apis/generated/clientset/versioned/scheme"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func startController(t *testing.T, c *cluster.Cluster) (*Controller, *Deployer, tidalclient.Interface) {
	t.Helper()
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	scaler, err := scale.NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{SidecarImage: "tidal.test/sidecar:1", Brokers: []string{"127.0.0.1:9092"}}, c.Client, scaler)
	tidalInf := tidalinformers.NewSharedInformerFactory(tidal, 0)
	kubeInf := informers.NewSharedInformerFactory(c.Client, 0)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(tidalscheme.Scheme, corev1.EventSource{Component: "tidal-actuator"})
	ctrl, err := NewController(d, zap.NewNop(), tidal, tidalInf, kubeInf, recorder, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tidalInf.StartWithContext(ctx)
	kubeInf.Start(ctx.Done())
	go func() { _ = ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		tidalInf.Shutdown()
		kubeInf.Shutdown()
		broadcaster.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return ctrl, d, tidal
}

func newFunction(name, image, input string) *functionsv1alpha1.Function {
	return &functionsv1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: functionsv1alpha1.FunctionSpec{
			Container: corev1.Container{Image: image},
			Protocol:  functionsv1alpha1.ProtocolHTTP,
			Input:     input,
		},
	}
}

func TestFunctionLifecycle(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	ctrl, d, tidal := startController(t, c)

	six, four := int32(6), int32(4)
	if _, err := tidal.FunctionsV1alpha1().Topics(ns).Create(ctx, &functionsv1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Name: "numbers"}, Spec: functionsv1alpha1.TopicSpec{Partitions: &six},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fn := newFunction("square", "tidal.test/square:1", "numbers")
	fn.Spec.MaxReplicas = &four
	fn, err := tidal.FunctionsV1alpha1().Functions(ns).Create(ctx, fn, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Deployed at zero, owned by the Function, with status.
	testkit.Eventually(t, 20*time.Second, "deployment", func() bool {
		dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "square", metav1.GetOptions{})
		return err == nil && *dep.Spec.Replicas == 0 && metav1.IsControlledBy(dep, fn) &&
			dep.Spec.Selector.MatchLabels["function"] == "square"
	})
	testkit.Eventually(t, 20*time.Second, "function status", func() bool {
		got, err := tidal.FunctionsV1alpha1().Functions(ns).Get(ctx, "square", metav1.GetOptions{})
		if err != nil || got.Status.DeploymentName != "square" {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == functionsv1alpha1.FunctionConditionReady && cond.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	})

	// A lag PodAutoscaler, owned by the Function, scales the Deployment.
	testkit.Eventually(t, 20*time.Second, "podautoscaler", func() bool {
		pa, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Get(ctx, "square", metav1.GetOptions{})
		return err == nil && metav1.IsControlledBy(pa, fn) && pa.Spec.Strategy == autoscalingv1alpha1.StrategyLag &&
			pa.Spec.ScaleTargetRef.Name == "square" && pa.Spec.Lag.Topic == "numbers" && pa.Spec.Lag.ConsumerGroup == "square" &&
			*pa.Spec.Lag.Riff.MaxReplicas == 4 && pa.Spec.Lag.Riff.IdleTimeout.Duration == 10*time.Second
	})

	// Scale within the cap: min(maxReplicas 4, partitions 6).
	limit, ok := ctrl.Cap(ns, "square")
	if !ok || limit != 4 {
		t.Fatalf("Cap = %d, %v; want 4", limit, ok)
	}
	if err := d.Scale(ctx, ns, "square", 3, limit); err != nil {
		t.Fatal(err)
	}
	if err := d.Scale(ctx, ns, "square", 5, limit); !errors.Is(err, ErrOverCap) {
		t.Errorf("Scale above the cap: err = %v, want ErrOverCap", err)
	}
	testkit.Eventually(t, 20*time.Second, "status replicas", func() bool {
		got, err := tidal.FunctionsV1alpha1().Functions(ns).Get(ctx, "square", metav1.GetOptions{})
		return err == nil && got.Status.Replicas == 3 && got.Status.ReadyReplicas == 3
	})

	// Update: a new image reaches the Deployment and the replicas stay.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := tidal.FunctionsV1alpha1().Functions(ns).Get(ctx, "square", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Container.Image = "tidal.test/square:2"
		_, err = tidal.FunctionsV1alpha1().Functions(ns).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "updated deployment", func() bool {
		dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "square", metav1.GetOptions{})
		return err == nil && dep.Spec.Template.Spec.Containers[0].Image == "tidal.test/square:2" && *dep.Spec.Replicas == 3
	})

	// Deleting the Function deletes its Deployment.
	if err := tidal.FunctionsV1alpha1().Functions(ns).Delete(ctx, "square", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "deployment deleted", func() bool {
		_, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "square", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	testkit.Eventually(t, 20*time.Second, "podautoscaler deleted", func() bool {
		_, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Get(ctx, "square", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestInvalidFunctionChangesNothing(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	_, _, tidal := startController(t, c)

	// The CRD accepts any topic string up to 249 bytes; Kafka does not.
	if _, err := tidal.FunctionsV1alpha1().Functions(ns).Create(ctx, newFunction("bad", "tidal.test/x:1", "no/slashes"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "InvalidSpec status", func() bool {
		got, err := tidal.FunctionsV1alpha1().Functions(ns).Get(ctx, "bad", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == functionsv1alpha1.FunctionConditionReady && cond.Status == metav1.ConditionFalse &&
				strings.Contains(cond.Message, "function "+ns+"/bad: invalid spec.input \"no/slashes\"") {
				return true
			}
		}
		return false
	})
	if _, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment of an invalid function: err = %v, want NotFound", err)
	}
	testkit.Eventually(t, 10*time.Second, "warning event", func() bool {
		list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad,reason=" + EventInvalidFunction})
		return err == nil && len(list.Items) > 0 && list.Items[0].Type == corev1.EventTypeWarning
	})
}

func TestDeployerCalls(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	scaler, err := scale.NewKube(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{SidecarImage: "tidal.test/sidecar:1"}, c.Client, scaler)
	f := Function{Namespace: ns, Name: "echo", Container: corev1.Container{Image: "tidal.test/echo:1"},
		Input: "in", Output: "out", Brokers: []string{"127.0.0.1:9092"}}

	name, created, err := d.Deploy(ctx, &f)
	if err != nil || name != "echo" || !created {
		t.Fatalf("Deploy = %q, %v, %v; want echo, created", name, created, err)
	}
	if err := d.Scale(ctx, ns, "echo", 2, 10); err != nil {
		t.Fatal(err)
	}
	// Deploy again keeps the replicas the autoscaler set.
	if _, created, err := d.Deploy(ctx, &f); err != nil || created {
		t.Fatalf("second Deploy: created %v, err %v", created, err)
	}
	dep, _ := c.Client.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
	if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas after re-Deploy = %d, want 2", *dep.Spec.Replicas)
	}
	// Update with new replicas and a new output topic.
	f.Output = "out2"
	five := int32(5)
	if n, err := d.Update(ctx, &f, &five); err != nil || n != 5 {
		t.Fatalf("Update = %d, %v; want 5", n, err)
	}
	dep, _ = c.Client.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
	if *dep.Spec.Replicas != 5 || !strings.Contains(strings.Join(dep.Spec.Template.Spec.Containers[1].Args, " "), "--outputs out2") {
		t.Errorf("after Update: replicas %d, sidecar args %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[1].Args)
	}
	// A bad update changes nothing.
	bad := f
	bad.Container.Image = ""
	if _, err := d.Update(ctx, &bad, nil); err == nil || !strings.Contains(err.Error(), "spec.container.image") {
		t.Errorf("bad Update: err = %v, want one naming spec.container.image", err)
	}
	// Update of a function never deployed: NotFound.
	ghost := f
	ghost.Name = "ghost"
	if _, err := d.Update(ctx, &ghost, nil); !errors.Is(err, scale.ErrNotFound) {
		t.Errorf("Update of a missing function: err = %v, want ErrNotFound", err)
	}
	if err := d.Scale(ctx, ns, "ghost", 1, 10); !errors.Is(err, scale.ErrNotFound) {
		t.Errorf("Scale of a missing function: err = %v, want ErrNotFound", err)
	}
	deleted, err := d.Undeploy(ctx, ns, "echo")
	if err != nil || !deleted {
		t.Fatalf("Undeploy = %v, %v; want deleted", deleted, err)
	}
	testkit.Eventually(t, 30*time.Second, "deployment gone", func() bool {
		_, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if deleted, err := d.Undeploy(ctx, ns, "echo"); err != nil || deleted {
		t.Errorf("second Undeploy = %v, %v; want not deleted, no error", deleted, err)
	}
}
