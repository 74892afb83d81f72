package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tidalscale/tidal/actuator/rbac"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// restrictedKubeconfig writes a kubeconfig for a ServiceAccount bound to
// exactly rbac.Rules() and nothing else, so the actuator under test proves
// the rules sufficient; extra rules are added to them (--knative's, for one).
func restrictedKubeconfig(t *testing.T, c *cluster.Cluster, ns string, extra ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	name := "tidal-actuator-" + ns
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tidal-actuator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: append(rbac.Rules(), extra...)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "tidal-actuator"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "tidal-actuator", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["actuator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "actuator"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startActuator runs the binary's run in Kubernetes mode and returns a
// client once it reports ready.
func startActuator(t *testing.T, kubeconfig string, extra ...string) actuatorv1.ActuatorServiceClient {
	t.Helper()
	grpcAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	return startActuatorAt(t, kubeconfig, grpcAddr, httpAddr, extra...)
}

func startActuatorAt(t *testing.T, kubeconfig, grpcAddr, httpAddr string, extra ...string) actuatorv1.ActuatorServiceClient {
	t.Helper()
	client, _ := runActuator(t, kubeconfig, grpcAddr, httpAddr, extra...)
	return client
}

// runActuator is startActuatorAt that also returns a stop, which ends the
// actuator and waits for it (the test's end stops it otherwise).
func runActuator(t *testing.T, kubeconfig, grpcAddr, httpAddr string, extra ...string) (actuatorv1.ActuatorServiceClient, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs, err := os.Create(filepath.Join(t.TempDir(), "actuator-flags.log"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- run(ctx, append([]string{
			"--scaler=kubernetes", "--kubeconfig=" + kubeconfig,
			"--grpc-addr=" + grpcAddr, "--http-addr=" + httpAddr,
			"--kafka-brokers=127.0.0.1:9092", "--function-sidecar-image=tidal.test/sidecar:1",
			"--target-retry=1s", "--log-level=debug",
		}, extra...), logs)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			if t.Failed() {
				b, _ := os.ReadFile(logs.Name())
				t.Logf("actuator flag output (its log is on stderr):\n%s", b)
			}
		})
	}
	t.Cleanup(stop)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("actuator exited: %w", err)
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet: poll again
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("actuator not ready: %v", err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return actuatorv1.NewActuatorServiceClient(conn), stop
}

func wantCode(t *testing.T, what string, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: err = %v, want %s containing %q", what, err, code, text)
	}
}

func TestActuatorOnKubernetes(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	client := startActuator(t, restrictedKubeconfig(t, c, ns), "--namespaces="+ns)
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	replicas := func(name string) int32 {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}

	// A KPA PodAutoscaler on a Deployment.
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("web", nil, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"autoscaling.knative.dev/max-scale": "10"}},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := &commonv1.TargetRef{Namespace: ns, Name: "web"}
	// Until the informer has the PodAutoscaler, its target is scaled as a
	// plain target, without the rules: it has it once a decision above
	// its max-scale is refused. Its first reconcile has made the Metric.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		_, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: web, DesiredReplicas: 11, DecisionSequence: 1_699_999_998_000, DryRun: true})
		_, merr := tidal.AutoscalingV1alpha1().Metrics(ns).Get(ctx, "web", metav1.GetOptions{})
		return status.Code(err) == codes.InvalidArgument && merr == nil, nil
	})
	if err != nil {
		t.Fatalf("the actuator never saw the PodAutoscaler: %v", err)
	}
	ebc := -20.0
	resp, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: web, DesiredReplicas: 4, DecisionSequence: 1_700_000_000_000,
		Reason: "panic: observed concurrency 30 over target 7", ExcessBurstCapacity: &ebc})
	if err != nil || !resp.GetChanged() || resp.GetAppliedReplicas() != 4 {
		t.Fatalf("Scale = %v, %v; want 4, changed", resp, err)
	}
	if got := replicas("web"); got != 4 {
		t.Errorf("replicas = %d, want 4", got)
	}
	get, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: web})
	if err != nil || get.GetReplicas() != 4 || get.GetLastAppliedSequence() != 1_700_000_000_000 || !strings.HasPrefix(get.GetLastReason(), "panic:") {
		t.Errorf("GetScale = %v, %v", get, err)
	}
	for range 2 {
		resp, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: web, DesiredReplicas: 1, DecisionSequence: 1_699_999_999_000})
		if err != nil || !resp.GetStale() || replicas("web") != 4 {
			t.Errorf("stale Scale = %v, %v; replicas %d; want refused", resp, err, replicas("web"))
		}
	}
	// The repeated refusal is one Event with count 2 (a patch).
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=StaleDecision"})
		return err == nil && len(list.Items) == 1 && list.Items[0].Count == 2 && list.Items[0].Type == corev1.EventTypeWarning, nil
	})
	if err != nil {
		t.Errorf("no StaleDecision Warning with count 2: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=Scaled"})
		return err == nil && len(list.Items) > 0 && list.Items[0].Message == "panic: 1 → 4, observed concurrency 30 over target 7", nil
	})
	if err != nil {
		t.Errorf("no Scaled Event: %v", err)
	}

	// Bad input: codes, and nothing changed.
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: web, DesiredReplicas: 11, DecisionSequence: 1_700_000_001_000})
	wantCode(t, "above max-scale", err, codes.InvalidArgument, "max-scale 10")
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: web, DesiredReplicas: -1, DecisionSequence: 1_700_000_001_000})
	wantCode(t, "negative", err, codes.InvalidArgument, "desired_replicas")
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "ghost"}, DesiredReplicas: 1, DecisionSequence: 1})
	wantCode(t, "missing target", err, codes.PermissionDenied, "no PodAutoscaler, Function or Knative PodAutoscaler names it")
	// A Deployment tidal does not manage is neither scaled nor read, nor
	// written or deleted as a function's; nor is anything outside the
	// namespaces the actuator watches.
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("plain", nil, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plain := &commonv1.TargetRef{Namespace: ns, Name: "plain"}
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: plain, DesiredReplicas: 5, DecisionSequence: 1_700_000_001_000})
	wantCode(t, "Scale of a Deployment no PodAutoscaler names", err, codes.PermissionDenied, "the actuator scales only what tidal manages")
	_, err = client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: plain})
	wantCode(t, "GetScale of a Deployment no PodAutoscaler names", err, codes.PermissionDenied, "no PodAutoscaler")
	// The actuator judges from its cache, which may not hold the new
	// Deployment yet; until it does, Undeploy finds nothing to delete.
	testkit.Eventually(t, 10*time.Second, "Undeploy of a Deployment no Function owns refused", func() bool {
		_, err = client.Undeploy(ctx, &actuatorv1.UndeployRequest{Function: &actuatorv1.FunctionRef{Namespace: ns, Name: "plain"}})
		return status.Code(err) == codes.PermissionDenied
	})
	wantCode(t, "Undeploy of a Deployment no Function owns", err, codes.PermissionDenied, "is not a function's")
	_, err = client.Deploy(ctx, &actuatorv1.DeployRequest{Function: &actuatorv1.FunctionRef{Namespace: ns, Name: "plain"},
		Spec: &actuatorv1.FunctionSpec{Image: "evil.test/miner:1", InputTopic: "in", Brokers: "127.0.0.1:9092"}})
	wantCode(t, "Deploy over a Deployment no Function owns", err, codes.PermissionDenied, "is not a function's")
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "kube-system", Name: "coredns"}, DesiredReplicas: 0, DecisionSequence: 1})
	wantCode(t, "Scale outside the watched namespaces", err, codes.PermissionDenied, "--namespaces")
	_, err = client.Undeploy(ctx, &actuatorv1.UndeployRequest{Function: &actuatorv1.FunctionRef{Namespace: "kube-system", Name: "coredns"}})
	wantCode(t, "Undeploy outside the watched namespaces", err, codes.PermissionDenied, "--namespaces")
	if d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "plain", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 || d.Spec.Template.Spec.Containers[0].Image == "evil.test/miner:1" {
		t.Errorf("the unmanaged Deployment after the refused calls: %v, %v; want it as it was", d, err)
	}
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "cfg", ApiVersion: "v1", Kind: "ConfigMap"}, DesiredReplicas: 1, DecisionSequence: 1})
	wantCode(t, "a kind not in --scale-kinds", err, codes.PermissionDenied, `target.kind "ConfigMap"`)
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "web-0", ApiVersion: "v1", Kind: "Pod"}, DesiredReplicas: 1, DecisionSequence: 1})
	wantCode(t, "a Pod", err, codes.PermissionDenied, `target.kind "Pod"`)
	if got := replicas("web"); got != 4 {
		t.Errorf("replicas after refused calls = %d, want 4", got)
	}

	// Deployer over gRPC.
	spec := &actuatorv1.FunctionSpec{Image: "tidal.test/echo:1", InputTopic: "in", OutputTopic: "out", Brokers: "127.0.0.1:9092", Env: map[string]string{"B": "2", "A": "1"}}
	fref := &actuatorv1.FunctionRef{Namespace: ns, Name: "echo"}
	if d, err := client.Deploy(ctx, &actuatorv1.DeployRequest{Function: fref, Spec: spec}); err != nil || d.GetDeployment() != "echo" {
		t.Fatalf("Deploy = %v, %v", d, err)
	}
	if got := replicas("echo"); got != 0 {
		t.Errorf("deployed replicas = %d, want 0", got)
	}
	three := int32(3)
	spec.Image = "tidal.test/echo:2"
	if u, err := client.Update(ctx, &actuatorv1.UpdateRequest{Function: fref, Spec: spec, Replicas: &three}); err != nil || u.GetReplicas() != 3 {
		t.Fatalf("Update = %v, %v", u, err)
	}
	dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 || dep.Spec.Template.Spec.Containers[0].Image != "tidal.test/echo:2" {
		t.Errorf("after Update: replicas %d, image %s", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Image)
	}
	_, err = client.Update(ctx, &actuatorv1.UpdateRequest{Function: &actuatorv1.FunctionRef{Namespace: ns, Name: "nobody"}, Spec: spec})
	wantCode(t, "Update of a missing function", err, codes.NotFound, "nobody")
	bad := &actuatorv1.FunctionSpec{Image: "tidal.test/echo:1", InputTopic: "no/slash", Brokers: "127.0.0.1:9092"}
	_, err = client.Deploy(ctx, &actuatorv1.DeployRequest{Function: &actuatorv1.FunctionRef{Namespace: ns, Name: "bad"}, Spec: bad})
	wantCode(t, "bad topic", err, codes.InvalidArgument, "spec.input_topic")
	if _, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused Deploy created a Deployment: %v", err)
	}
	if u, err := client.Undeploy(ctx, &actuatorv1.UndeployRequest{Function: fref}); err != nil || !u.GetDeleted() {
		t.Errorf("Undeploy = %v, %v", u, err)
	}

	// A Function object: Deployment and lag PodAutoscaler, and the cap.
	two := int32(2)
	if _, err := tidal.FunctionsV1alpha1().Topics(ns).Create(ctx, &functionsv1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Name: "numbers"},
		Spec: functionsv1alpha1.TopicSpec{Partitions: &two}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tidal.FunctionsV1alpha1().Functions(ns).Create(ctx, &functionsv1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "square"},
		Spec: functionsv1alpha1.FunctionSpec{Container: corev1.Container{Image: "tidal.test/square:1"}, Input: "numbers"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		_, derr := c.Client.AppsV1().Deployments(ns).Get(ctx, "square", metav1.GetOptions{})
		_, perr := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Get(ctx, "square", metav1.GetOptions{})
		return derr == nil && perr == nil, nil
	})
	if err != nil {
		t.Fatalf("function not deployed: %v", err)
	}
	square := &commonv1.TargetRef{Namespace: ns, Name: "square"}
	_, err = client.Scale(ctx, &actuatorv1.ScaleRequest{Target: square, DesiredReplicas: 3, DecisionSequence: 5})
	wantCode(t, "above the partition cap", err, codes.InvalidArgument, "want 0 to 2")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		r, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: square, DesiredReplicas: 2, DecisionSequence: 6, Reason: "lag: 40 over 2 partitions"})
		return err == nil && r.GetAppliedReplicas() == 2, nil
	})
	if err != nil || replicas("square") != 2 {
		t.Errorf("function Scale within the cap: %v, replicas %d", err, replicas("square"))
	}
}

// TestActuatorsShareAndForward: two actuators split the PodAutoscalers by
// bucket Leases; a decision sent to either reaches the owner, which alone
// writes the target.
func TestActuatorsShareAndForward(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	var clients []actuatorv1.ActuatorServiceClient
	for range 2 {
		addr := testkit.FreeAddr(t)
		clients = append(clients, startActuatorAt(t, c.Kubeconfig, addr, testkit.FreeAddr(t),
			"--buckets=32", "--lease-namespace="+ns, "--advertise-addr="+addr,
			"--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms"))
	}
	const n = 6
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment(name, nil, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: autoscalingv1alpha1.PodAutoscalerSpec{
				ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every decision goes through both replicas in turn: whichever does not
	// own the PodAutoscaler forwards it.
	for round, seq := range []uint64{1_700_000_000_000, 1_700_000_002_000} {
		for i := range n {
			name := fmt.Sprintf("web-%d", i)
			want := int32(2 + round + i%2)
			client := clients[(i+round)%2]
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				resp, err := client.Scale(ctx, &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: name},
					DesiredReplicas: want, DecisionSequence: seq, Reason: "stable: test"})
				// UNAVAILABLE while the replicas are still sharing the buckets out.
				return err == nil && resp.GetAppliedReplicas() == want, nil
			})
			if err != nil {
				t.Fatalf("Scale %s to %d through replica %d: %v", name, want, (i+round)%2, err)
			}
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || *d.Spec.Replicas != want {
				t.Errorf("%s: replicas %v, %v; want %d", name, d.Spec.Replicas, err, want)
			}
		}
	}
	// Both replicas hold some of the buckets (with 32 buckets, the chance
	// that one replica is preferred for all is 2^-31).
	holders := map[string]int{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		leases, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		clear(holders)
		for _, l := range leases.Items {
			if h := l.Spec.HolderIdentity; h != nil && *h != "" && !strings.Contains(l.Name, "member") {
				holders[*h]++
			}
		}
		return len(holders) == 2, nil
	})
	if err != nil {
		t.Errorf("bucket holders = %v, want both replicas: %v", holders, err)
	}
}
