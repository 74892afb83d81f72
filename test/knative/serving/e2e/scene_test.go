package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	"knative.dev/pkg/apis"
	asv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/knative/knactivator"
	"github.com/tidalscale/tidal/test/knative/serving"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
	"github.com/tidalscale/tidal/test/workload"
)

// scene is Knative Serving's controller and tidal's three services in
// Knative mode on the shared test cluster, with the stand-ins of
// fakes_test.go, for one Knative Service in a namespace of the test's own.
type scene struct {
	c         *cluster.Cluster
	ns        string
	sc        servingclient.Interface
	nc        netclient.Interface
	kube      kubernetes.Interface // v1 Endpoints without deprecation warnings
	knBins    serving.Binaries
	tidalDir  string // tidal's three binaries
	kc        *knProcess
	tidal     *system.System
	act       *knactivator.Activator // Knative's activator code, dialling tidal's collector
	front     *serviceFront
	frontIP   string
	svcName   string
	rev       string
	publicRev string // the revision's public Service host name
	wsAddr    string // the collector's activator endpoint

	// Set by options: when trafficPort is not 0, the simulated pods serve
	// requests there with traffic, and the mirrored private Endpoints give
	// that port for the pods' http port (activator_test.go).
	trafficPort int32
	traffic     func(pod string) http.Handler
	// leases runs the collector and the actuator with bucket Leases, as
	// the chart does (withLeases).
	leases bool

	// Set by createService.
	rate *system.Dial
	reps *replicaLog
}

// chartBuckets is the chart's default collector.buckets and
// actuator.buckets.
const chartBuckets = 10

// withLeases runs the scene's collector and actuator with bucket Leases,
// as the chart does: the actuator then holds its PodAutoscalers.
func withLeases(s *scene) { s.leases = true }

// knativeInstall installs Knative once per test binary: the shared
// cluster outlives each test.
var knativeInstall struct {
	once sync.Once
	err  error
}

// knativeMetricsAddr is where Knative's processes serve their Prometheus
// metrics (config-observability's metrics-endpoint): a free loopback port
// picked at install; the controller's is in its own network namespace.
var knativeMetricsAddr string

// startScene installs Knative (once), starts Knative's controller and
// tidal's services, and connects Knative's activator code to tidal's
// collector; all of it stops when t ends. opts set the scene's options
// before anything starts.
func startScene(t *testing.T, opts ...func(*scene)) *scene {
	t.Helper()
	s := startKnativeScene(t, opts...)
	c := s.c
	ctx := context.Background()

	// tidal in Knative mode, and Knative's activator reporting code
	// dialling the collector's activator endpoint.
	wsAddr := testkit.FreeAddr(t)
	s.wsAddr = wsAddr
	s.act = knactivator.Start(t, "ws://"+wsAddr, "activator-e2e")
	s.front.useActivator(s.act.Handler())
	binDir := actuatorWithHosts(t, s.tidalDir, s.hosts())
	var err error
	cfgDir := t.TempDir()
	for k, v := range autoscalerConfig {
		if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := map[string][]string{
		"actuator":  {"--knative"},
		"collector": {"--knative", "--knative-config-autoscaler", cfgDir, "--activator-listen", wsAddr},
	}
	if s.leases {
		for _, svc := range []string{"actuator", "collector"} {
			args[svc] = append(args[svc], "--buckets", strconv.Itoa(chartBuckets), "--lease-namespace", s.ns)
		}
	}
	s.tidal, err = system.Start(sctx, system.Options{
		BinDir: binDir, Cluster: c, AutoscalerConfig: autoscalerConfig, Log: testWriter{t}, Args: args,
	})
	if err != nil {
		t.Fatalf("start tidal: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			testkit.KeepLog(t, "namespace "+s.ns, c.Describe(context.Background(), s.ns))
			for _, p := range s.tidal.Procs() {
				testkit.KeepLog(t, p.Name, p.LogTail(1<<20))
			}
		}
		if err := s.tidal.Stop(); err != nil {
			t.Error(err)
		}
	})
	s.act.WaitReady(t, 30*time.Second)
	return s
}

// startKnativeScene installs Knative (once) and starts Knative's controller and
// the stand-ins of fakes_test.go for a namespace of the test's own, with no
// autoscaler: the front serves the revision's public Service once the
// caller gives it an activator (useActivator). Knative's controller stops
// when t ends. opts set the scene's options before anything starts.
func startKnativeScene(t *testing.T, opts ...func(*scene)) *scene {
	t.Helper()
	knBins, tidalDir := binaries(t)
	c := cluster.Shared(t)
	ctx := context.Background()
	s := &scene{c: c, ns: c.Namespace(t), knBins: knBins, tidalDir: tidalDir, svcName: "web", rev: "web-00001"}
	for _, o := range opts {
		o(s)
	}
	var err error
	if s.sc, err = servingclient.NewForConfig(c.Config()); err != nil {
		t.Fatal(err)
	}
	if s.nc, err = netclient.NewForConfig(c.Config()); err != nil {
		t.Fatal(err)
	}
	// The test reads and writes v1 Endpoints (Knative v0.50.0's SKS
	// reconciler reads them), deprecated since Kubernetes 1.33: no warning
	// on every write.
	quiet := c.Config()
	quiet.WarningHandler = rest.NoWarnings{}
	if s.kube, err = kubernetes.NewForConfig(quiet); err != nil {
		t.Fatal(err)
	}

	// Knative Serving: CRDs, knative-serving's ConfigMaps, its controller.
	knativeInstall.once.Do(func() {
		var ports []int
		if ports, knativeInstall.err = testkit.FreePorts(1); knativeInstall.err != nil {
			return
		}
		knativeMetricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		knativeInstall.err = installKnative(ictx, c, map[string]map[string]string{
			"config-autoscaler": autoscalerConfig,
			"config-deployment": {"queue-sidecar-image": queueImage},
			// Prometheus on a loopback port of its own: by default the
			// exporter would bind :9090 on every address, where the
			// simulated queue-proxies listen. Knative's autoscaler serves
			// its kn_revision_* metrics there (knmetrics_test.go).
			"config-observability": {"metrics-protocol": "prometheus", "metrics-endpoint": knativeMetricsAddr},
		})
	})
	if knativeInstall.err != nil {
		t.Fatal(knativeInstall.err)
	}
	s.kc = startController(t, knBins.Controller, c)
	s.kc.waitLeader(ctx, t, c, "revision", time.Minute)
	mirrorPrivateEndpoints(t, s.kube, s.ns, s.trafficPort)
	markIngressesReady(t, s.nc, s.ns)
	s.front = &serviceFront{kube: s.kube}
	s.frontIP = activatorFront(t, s.front)
	s.publicRev = s.rev + "." + s.ns + ".svc.cluster.local"
	return s
}

// hosts is the cluster DNS the activator probe needs: the revision's
// public Service name at the front.
func (s *scene) hosts() map[string]string { return map[string]string{s.publicRev: s.frontIP} }

// createService creates the Knative Service, defaulted and validated by
// Knative's own webhook code (SetDefaults, Validate) as its admission
// webhooks would on create, starts the simulated pods of its Revision's
// Deployment with no load (s.rate sets it) and follows the Deployment's
// replicas (s.reps); it returns when the Service was created. annotations
// go on the Revision template.
func (s *scene) createService(t *testing.T, annotations map[string]string) time.Time {
	t.Helper()
	ctx := context.Background()
	svc := &servingv1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.svcName, Namespace: s.ns},
		Spec: servingv1.ServiceSpec{ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec:       servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: userImage}}}},
		}}},
	}
	wctx := apis.WithinCreate(apis.WithUserInfo(ctx, &authenticationv1.UserInfo{Username: "e2e"}))
	svc.SetDefaults(wctx)
	// Warnings (Kubernetes' insecure securityContext defaults) admit it,
	// as the webhook admits it with warnings.
	if err := svc.Validate(wctx).Filter(apis.ErrorLevel); err != nil {
		t.Fatalf("Knative's validation refuses the defaulted Service: %v", err)
	}
	start := time.Now()
	if _, err := s.sc.ServingV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The simulated pods start serving as soon as the Revision's
	// Deployment exists, with no load until the test sets a rate: requests
	// arriving with no pod would queue (as at the activator) and land on
	// the first pod at once.
	deployment := s.rev + "-deployment"
	eventually(t, s.kc, 60*time.Second, "the Revision's Deployment", func() (bool, string) {
		_, err := s.c.Client.AppsV1().Deployments(s.ns).Get(ctx, deployment, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	s.rate = system.NewDial(0)
	wl, err := workload.Start(ctx, workload.Options{Client: s.c.Client, Namespace: s.ns, Deployment: deployment,
		Profile: s.rate, Model: workload.ModelConfig{ServiceTime: serviceTime},
		TrafficPort: int(s.trafficPort), Traffic: s.traffic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	s.reps = followReplicas(t, s.c, s.ns, deployment)
	return start
}

// waitRevisionReady waits until Knative's controller marks the Revision
// Ready.
func (s *scene) waitRevisionReady(t *testing.T) {
	t.Helper()
	eventually(t, s.kc, 60*time.Second, "the Revision Ready", func() (bool, string) {
		r, err := s.sc.ServingV1().Revisions(s.ns).Get(context.Background(), s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.IsReady(), fmt.Sprintf("conditions %+v", r.Status.Conditions)
	})
}

// waitTidalPA waits until the Revision's PodAutoscaler is Ready with a
// decision of tidal's in its status, and returns it.
func (s *scene) waitTidalPA(t *testing.T) *asv1alpha1.PodAutoscaler {
	t.Helper()
	var pa *asv1alpha1.PodAutoscaler
	eventually(t, s.kc, 30*time.Second, "the PodAutoscaler Ready with tidal's decision", func() (bool, string) {
		var err error
		pa, err = s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(context.Background(), s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pa.IsReady() && pa.Status.Annotations[decisionAnnotation] != "", fmt.Sprintf("status %+v", pa.Status)
	})
	return pa
}

// decisionAnnotation is the PodAutoscaler status annotation holding
// tidal's last decision.
const decisionAnnotation = "autoscaling.tidal.dev/decision"

// scaleToZero stops the load and waits for the Deployment at zero, no
// sooner than the stable window (to decide 0) and the grace period, with
// the ServerlessService in Proxy mode, the activator probe answered by the
// activator, the Revision inactive but Ready and the public Endpoints on
// the activator. who names the autoscaler in messages.
func (s *scene) scaleToZero(t *testing.T, who string) {
	t.Helper()
	ctx := context.Background()
	probesBefore := s.front.Activator.Load()
	s.rate.Set(0)
	idleFrom := time.Now()
	s.reps.waitSpec(t, s.kc, 0, 90*time.Second, who+": scale to zero")
	idle := time.Since(idleFrom)
	t.Logf("%s: zero %s after the load stopped", who, idle.Round(100*time.Millisecond))
	if least := stableWindow + gracePeriod - time.Second; idle < least {
		t.Errorf("%s: zero %s after the load stopped, want at least the stable window and the grace period (%s)", who, idle, least)
	}
	sks, err := s.nc.NetworkingV1alpha1().ServerlessServices(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sks.Spec.Mode != netv1alpha1.SKSOperationModeProxy {
		t.Errorf("%s: ServerlessService mode %q at zero, want Proxy", who, sks.Spec.Mode)
	}
	if n := s.front.Activator.Load(); n == probesBefore {
		t.Errorf("%s: no activator probe was answered by the activator before zero (probes to pods: %d)", who, s.front.Pods.Load())
	}
	eventually(t, s.kc, 30*time.Second, "the Revision inactive, still Ready", func() (bool, string) {
		r, err := s.sc.ServingV1().Revisions(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		active := r.Status.GetCondition(servingv1.RevisionConditionActive)
		return r.IsReady() && active != nil && active.IsFalse(), fmt.Sprintf("conditions %+v", r.Status.Conditions)
	})
	eventually(t, s.kc, 30*time.Second, "the public Endpoints on the activator", func() (bool, string) {
		eps, err := s.kube.CoreV1().Endpoints(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return toActivator(eps), fmt.Sprintf("subsets %+v", eps.Subsets)
	})
}

// backFromZero sends one request to the revision's public Service, which
// the front hands to the activator in use, and waits for kpaWant(1) = 1
// pod Ready, never more: Knative's ConcurrencyReporter sends its
// first-request stat over its websocket, and the autoscaler it reports to
// brings the Revision back.
func (s *scene) backFromZero(t *testing.T, who string) {
	t.Helper()
	rctx, release := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.request(rctx) })
	defer func() { release(); wg.Wait() }()
	backFrom := time.Now()
	s.reps.waitReady(t, s.kc, kpaWant(1), 30*time.Second, who+": back from zero")
	t.Logf("%s: back from zero: %d pod Ready %s after the request reached the activator", who, kpaWant(1), time.Since(backFrom).Round(100*time.Millisecond))
	if _, hi := s.reps.bounds(backFrom); hi != kpaWant(1) {
		t.Errorf("%s: back from zero: replicas reached %d, want %d", who, hi, kpaWant(1))
	}
}
