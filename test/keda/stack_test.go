package keda

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tidalscale/tidal/identity/pki"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/keda/operator"
	"github.com/tidalscale/tidal/test/netns"
	"github.com/tidalscale/tidal/test/testkit"
)

// kedaNamespace is KEDA's own namespace: where its operator reads the
// Secrets of ClusterTriggerAuthentications (KEDA_CLUSTER_OBJECT_NAMESPACE)
// and where the chart puts KEDA's client certificate (keda.namespace).
const kedaNamespace = "keda"

// The external metrics API as KEDA registers it: an APIService naming the
// Service in front of its metrics server.
const (
	metricsAPIService = "v1beta1.external.metrics.k8s.io"
	adapterService    = "keda-metrics-apiserver"
	adapterPort       = 6443
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// kedaBuild builds KEDA's binaries once per test binary (`make keda` builds
// them first, so this finds the cache warm).
var kedaBuild struct {
	once sync.Once
	bins operator.Binaries
	err  error
	log  bytes.Buffer
}

func kedaBinaries(t *testing.T) operator.Binaries {
	t.Helper()
	kedaBuild.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		dir, err := os.Getwd() // the package's directory, test/keda
		if err == nil {
			kedaBuild.bins, err = operator.EnsureBinaries(ctx, dir, &kedaBuild.log)
		}
		kedaBuild.err = err
	})
	if kedaBuild.err != nil {
		t.Fatalf("KEDA's binaries: %v\n%s", kedaBuild.err, kedaBuild.log.String())
	}
	return kedaBuild.bins
}

// kedaStack is KEDA's operator and metrics API server running as processes
// against a test cluster, as KEDA's chart deploys them, except for RBAC
// (both use the admin kubeconfig: KEDA's RBAC is not under test) and their
// certificates (a CA of the test's own in place of KEDA's cert rotation).
type kedaStack struct {
	operator, adapter *cluster.Process
}

// startKEDA starts KEDA's operator and metrics API server against c and
// registers the external metrics API, so that kube-controller-manager's HPA
// controller reads the metrics of the HPAs KEDA makes from KEDA's server;
// all of it goes when t ends. The operator runs on the machine's network,
// where it reaches tidal's collector and the kfake brokers on loopback. The
// metrics server runs in a network namespace of its own (test/netns), at the
// address of a veth pair the API server can reach (the API refuses loopback
// endpoints), with the API server's and the operator's loopback ports
// relayed in.
func startKEDA(t *testing.T, c *cluster.Cluster) *kedaStack {
	t.Helper()
	bins := kedaBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ensureNamespace(ctx, t, c, kedaNamespace)

	ca, err := pki.NewCA("KEDA test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(dir string, leaf pki.Leaf) string {
		leaf.Validity = time.Hour
		iss, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), dir)
		if err := ca.WriteDir(path, iss); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// The operator's metrics service (gRPC, mutual TLS with certificates
	// of KEDA's CA from --cert-dir) is what the metrics server asks for
	// every metric value.
	grpcAddr := testkit.FreeAddr(t)
	opCerts := issue("operator", pki.Leaf{CommonName: "keda-operator",
		DNSNames: []string{"keda-operator." + kedaNamespace + ".svc.cluster.local"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "WATCH_NAMESPACE=", "POD_NAMESPACE=" + kedaNamespace,
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + kedaNamespace}
	k := &kedaStack{}
	k.operator = runPeer(t, c, "keda-operator", exec.Command(bins.Operator,
		"--metrics-service-bind-address="+grpcAddr, "--cert-dir="+opCerts,
		"--enable-prometheus-metrics=false", "--health-probe-bind-address=0",
		// No CA of its own for scalers: tidal's comes with each trigger.
		"--ca-dir="+t.TempDir(), "--zap-log-level=info"), env)
	testkit.Eventually(t, time.Minute, "KEDA's operator serving its metrics service on "+grpcAddr, func() bool {
		conn, err := net.DialTimeout("tcp", grpcAddr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil && k.operator.Err() == nil
	}, describe(k.operator))

	api, err := url.Parse(c.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New(api.Host, grpcAddr)
	if err != nil {
		t.Fatalf("KEDA's metrics server runs in a network namespace of its own: %v", err)
	}
	t.Cleanup(ns.Close)
	_, inside, err := ns.Link(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svcHost := adapterService + "." + kedaNamespace + ".svc"
	adCerts := issue("adapter", pki.Leaf{CommonName: adapterService,
		DNSNames: []string{svcHost, svcHost + ".cluster.local"}, IPs: []net.IP{inside.AsSlice()}})
	cmd, err := ns.Command(bins.Adapter,
		"--secure-port="+strconv.Itoa(adapterPort), "--bind-address="+inside.String(),
		// Its gRPC client reads ca.crt, tls.crt and tls.key from the
		// serving certificate's directory.
		"--cert-dir="+adCerts,
		"--tls-cert-file="+filepath.Join(adCerts, pki.CertFile), "--tls-private-key-file="+filepath.Join(adCerts, pki.KeyFile),
		"--lister-kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--metrics-service-address="+grpcAddr, "--zap-log-level=info")
	if err != nil {
		t.Fatal(err)
	}
	k.adapter = runPeer(t, c, "keda-metrics-apiserver", cmd, env)
	registerMetricsAPI(ctx, t, c, inside.String(), ca.CertPEM, k.adapter)
	return k
}

// registerMetricsAPI points v1beta1.external.metrics.k8s.io at the
// metrics server listening at addr (a Service without selector and an
// EndpointSlice of its own, which the aggregator reads), trusting caPEM for
// its certificate, and waits until the API server reports it Available.
// All three go when t ends, the APIService first, before the server stops:
// an unavailable aggregated API would stall namespace deletion in the
// shared cluster.
func registerMetricsAPI(ctx context.Context, t *testing.T, c *cluster.Cluster, addr string, caPEM []byte, adapter *cluster.Process) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: adapterService, Namespace: kedaNamespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(adapterPort)}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: adapterService, Namespace: kedaNamespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: adapterService,
			// Neither the EndpointSlice controller (the Service has no
			// selector) nor the mirroring one (there are no Endpoints)
			// touches it.
			discoveryv1.LabelManagedBy: "tidal-test-keda",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(int32(adapterPort)), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	services, slices := c.Client.CoreV1().Services(kedaNamespace), c.Client.DiscoveryV1().EndpointSlices(kedaNamespace)
	if err := recreate(ctx, func() error {
		_, err := services.Create(ctx, svc, metav1.CreateOptions{})
		return err
	}, func() error { return services.Delete(ctx, svc.Name, metav1.DeleteOptions{}) }); err != nil {
		t.Fatalf("Service %s: %v", svc.Name, err)
	}
	deleteAtEnd(t, "Service "+svc.Name, func(ctx context.Context) error { return services.Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
	if err := recreate(ctx, func() error {
		_, err := slices.Create(ctx, slice, metav1.CreateOptions{})
		return err
	}, func() error { return slices.Delete(ctx, slice.Name, metav1.DeleteOptions{}) }); err != nil {
		t.Fatalf("EndpointSlice %s: %v", slice.Name, err)
	}
	deleteAtEnd(t, "EndpointSlice "+slice.Name, func(ctx context.Context) error { return slices.Delete(ctx, slice.Name, metav1.DeleteOptions{}) })
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	apiSvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": metricsAPIService},
		"spec": map[string]any{
			"group":                "external.metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"service":              map[string]any{"namespace": kedaNamespace, "name": adapterService, "port": int64(443)},
		},
	}}
	apis := dyn.Resource(apiServiceGVR)
	if err := recreate(ctx, func() error {
		_, err := apis.Create(ctx, apiSvc, metav1.CreateOptions{})
		return err
	}, func() error {
		return apis.Delete(ctx, metricsAPIService, metav1.DeleteOptions{})
	}); err != nil {
		t.Fatalf("APIService %s: %v", metricsAPIService, err)
	}
	deleteAtEnd(t, "APIService "+metricsAPIService, func(ctx context.Context) error { return apis.Delete(ctx, metricsAPIService, metav1.DeleteOptions{}) })
	var last string
	testkit.Eventually(t, 90*time.Second, "APIService "+metricsAPIService+" Available (the API server reaching KEDA's metrics server)", func() bool {
		o, err := apis.Get(ctx, metricsAPIService, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, cnd := range conds {
			m, _ := cnd.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", m["status"], m["message"])
				return m["status"] == "True"
			}
		}
		return false
	}, func() string { return "last condition: " + last + "\n" + describe(adapter)() })
}

// deleteAtEnd runs del when t ends; a NotFound is no error.
func deleteAtEnd(t *testing.T, what string, del func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", what, err)
		}
	})
}

// recreate runs create, and when the object exists (left by an earlier test
// of this binary), del and create again.
func recreate(ctx context.Context, create, del func() error) error {
	err := create()
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := del(); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// The deletion may still be going: create again until it is done.
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		err := create()
		return !apierrors.IsAlreadyExists(err), err
	})
}

// ensureNamespace creates namespace ns unless it exists.
func ensureNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", ns, err)
	}
}

// runPeer runs cmd, with env added, as a component of c (Cluster.Run: its
// own process group, its log in the cluster's directory) until t ends,
// keeping its log if t failed.
func runPeer(t *testing.T, c *cluster.Cluster, name string, cmd *exec.Cmd, env []string) *cluster.Process {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	p, err := c.Run(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			testkit.KeepLog(t, name, p.LogTail(1<<20))
		}
	})
	return p
}

// describe is how p runs and the end of its log, for a failed wait.
func describe(p *cluster.Process) func() string {
	return func() string {
		state := "running"
		if err := p.Err(); err != nil {
			state = err.Error()
		}
		return state + "\n" + p.LogTail(30)
	}
}
