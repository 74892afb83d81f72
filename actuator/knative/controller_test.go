package knative

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/duck"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func installKnativeCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := knativetest.InstallCRDs(ctx, c); err != nil {
		t.Fatalf("install Knative's CRDs: %v", err)
	}
}

// activator answers the activator probe as Knative's activator does, once
// inPath is set; it records the probes' hosts.
type activator struct {
	srv    *httptest.Server
	inPath atomic.Bool
	mu     sync.Mutex
	probes []string
}

func newActivator(t *testing.T) *activator {
	a := &activator{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.probes = append(a.probes, r.Host+r.URL.Path+" "+r.Header.Get("K-Network-Probe"))
		a.mu.Unlock()
		if !a.inPath.Load() || r.Header.Get("K-Network-Probe") != "activator" {
			// The revision's own pods answer the probe otherwise.
			http.Error(w, "queue", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("activator"))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// transport sends every request to the activator, whatever its host: the
// Service's cluster DNS name does not resolve here.
func (a *activator) transport() http.RoundTripper {
	addr := a.srv.Listener.Addr().String()
	return &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func (a *activator) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.probes)
}

type harness struct {
	t     *testing.T
	c     *cluster.Cluster
	ns    string
	clock *clocktesting.FakePassiveClock
	kn    *knclient.Client
	ctrl  *Controller
	kind  *kind
	act   *activator
}

func newHarness(t *testing.T, classes ...string) *harness {
	t.Helper()
	c := cluster.Shared(t)
	installKnativeCRDs(t, c)
	ns := c.Namespace(t)
	rc := c.Config()
	kn, err := knclient.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	live, err := scale.NewKube(rc)
	if err != nil {
		t.Fatal(err)
	}
	kubeInf := informers.NewSharedInformerFactory(c.Client, 0)
	scaler, err := scale.NewCached(live, kubeInf.Apps().V1().Deployments())
	if err != nil {
		t.Fatal(err)
	}
	act := newActivator(t)
	recorder, broadcaster := podautoscaler.NewEventRecorder(c.Client)
	clk := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	cfg := Config{Classes: classes, ProbeTransport: act.transport(), Config: podautoscaler.Config{
		Autoscaler: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), Workers: 2, TargetRetry: time.Second}}
	ctrl, k, err := newController(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), clk, kn, kubeInf, scaler, recorder)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	kubeInf.Start(ctx.Done())
	go func() { _ = ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		kubeInf.Shutdown()
		broadcaster.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("caches did not sync")
	}
	h := &harness{t: t, c: c, ns: ns, clock: clk, kn: kn, ctrl: ctrl, kind: k, act: act}
	return h
}

// revision plays Knative's revision reconciler: the Revision's Deployment
// and its PodAutoscaler, as pkg/reconciler/revision/resources makes them
// (named like the Revision, its labels, class annotation, containerConcurrency,
// reachability, protocolType).
func (h *harness) revision(name, class string, replicas int32) {
	h.t.Helper()
	labels := map[string]string{knautoscaling.LabelRevision: name, "serving.knative.dev/service": "svc"}
	d := cluster.Deployment(name, labels, replicas)
	if _, err := h.c.Client.AppsV1().Deployments(h.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	pa := &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{}},
		Spec: knautoscaling.PodAutoscalerSpec{
			ContainerConcurrency: 0,
			ScaleTargetRef:       corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			Reachability:         knautoscaling.ReachabilityReachable,
			ProtocolType:         knautoscaling.ProtocolHTTP1,
		},
	}
	if class != "" {
		pa.Annotations[knautoscaling.AnnotationClass] = class
	}
	if _, err := h.kn.PodAutoscalers(h.ns).Create(context.Background(), pa, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	testkit.Eventually(h.t, 20*time.Second, what, cond)
}

func (h *harness) pa(name string) *knautoscaling.PodAutoscaler {
	h.t.Helper()
	pa, err := h.kn.PodAutoscalers(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pa
}

func (h *harness) sks(name string) *knnetworking.ServerlessService {
	h.t.Helper()
	s, err := h.kn.ServerlessServices(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}

// serveSKS plays Knative's ServerlessService reconciler: the public and
// private Services exist, and the activator is in the path when the mode
// is Proxy (ActivatorEndpointsPopulated since the fake clock's now).
func (h *harness) serveSKS(name string) {
	h.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := h.sks(name)
		if s == nil {
			return nil
		}
		now := h.clock.Now()
		s.Status.ServiceName, s.Status.PrivateServiceName = name, name+"-private"
		s.Status.ObservedGeneration = s.Generation
		s.Status.Set(duck.Condition{Type: knnetworking.ConditionEndpointsPopulated, Status: corev1.ConditionTrue}, now)
		act := corev1.ConditionFalse
		if s.Spec.Mode == knnetworking.ModeProxy {
			act = corev1.ConditionTrue
		}
		s.Status.Set(duck.Condition{Type: knnetworking.ConditionActivatorEndpoints, Status: act, Severity: duck.SeverityInfo}, now)
		s.Status.DeriveReady(now, knnetworking.ConditionEndpointsPopulated)
		_, err := h.kn.ServerlessServices(h.ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) scale(name string, seq uint64, desired int32, ebc int32) scale.Result {
	h.t.Helper()
	res, err := h.ctrl.Scale(context.Background(), podautoscaler.Request{
		Decision:            scale.Decision{Target: scale.Target{Namespace: h.ns, Name: name, APIVersion: "apps/v1", Kind: "Deployment"}, Desired: desired, Sequence: seq, Reason: "test"},
		ExcessBurstCapacity: &ebc,
	})
	if err != nil {
		h.t.Fatalf("Scale(%s, seq %d, %d): %v", name, seq, desired, err)
	}
	return res
}

// reconcile runs one reconcile now, as a requeue would.
func (h *harness) reconcile(name string) podautoscaler.Outcome {
	h.t.Helper()
	out, err := h.ctrl.Sync(context.Background(), cache.ObjectName{Namespace: h.ns, Name: name})
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
	return out
}

// selectors and writes are what the controller keeps per PodAutoscaler
// beyond its informer's copy.
func (h *harness) selectors() int { n, _ := h.ctrl.Kept(); return n }
func (h *harness) writes() int    { _, n := h.ctrl.Kept(); return n }

func (h *harness) replicas(name string) int32 {
	h.t.Helper()
	d, err := h.c.Client.AppsV1().Deployments(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return *d.Spec.Replicas
}

func (h *harness) eventMessages(name, reason string) []string {
	list, err := h.c.Client.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out
}

func cond(pa *knautoscaling.PodAutoscaler, typ string) string {
	c := pa.Status.Get(typ)
	if c == nil {
		return "<none>"
	}
	s := string(c.Status)
	if c.Reason != "" {
		s += "/" + c.Reason
	}
	return s
}

func scaleOf(p *int32) int32 {
	if p == nil {
		return -2
	}
	return *p
}

// TestRevisionLifecycle follows a Knative PodAutoscaler made as Knative's
// revision reconciler makes it: the ServerlessService is created in Proxy
// mode, status follows it, a decision scales the Deployment and puts the
// SKS in Serve mode, an older decision is refused, and no traffic takes it
// to Proxy mode and, once the activator answers the probe and the grace
// period has passed, to zero.
func TestRevisionLifecycle(t *testing.T) {
	h := newHarness(t)
	h.revision("rev-1", "", 1)

	// The SKS, in Proxy mode with Knative's two activators, owned by the PA.
	h.eventually("serverlessservice", func() bool { return h.sks("rev-1") != nil })
	s := h.sks("rev-1")
	if got, want := s.Spec.Mode, knnetworking.ModeProxy; got != want {
		t.Errorf("sks mode = %s, want %s", got, want)
	}
	if got, want := s.Spec.NumActivators, int32(2); got != want {
		t.Errorf("sks numActivators = %d, want %d", got, want)
	}
	if got, want := s.Spec.ObjectRef.Name, "rev-1"; got != want {
		t.Errorf("sks objectRef = %q, want %q", got, want)
	}
	if got, want := s.Spec.ProtocolType, "http1"; got != want {
		t.Errorf("sks protocolType = %q, want %q", got, want)
	}
	if !metav1.IsControlledBy(s, h.pa("rev-1")) {
		t.Errorf("sks owners = %v, want controlled by the podautoscaler", s.OwnerReferences)
	}
	h.eventually("SKSReady Unknown before the SKS has a private service", func() bool {
		pa := h.pa("rev-1")
		return cond(pa, knautoscaling.ConditionSKSReady) == "Unknown/NotReady" && pa.Status.ObservedGeneration == pa.Generation
	})
	if pa := h.pa("rev-1"); cond(pa, knautoscaling.ConditionReady) == "True" {
		t.Errorf("Ready = True before the SKS is ready")
	}

	// Knative's controller reconciles the SKS; the PA follows it.
	h.serveSKS("rev-1")
	h.eventually("status from the SKS and the pods", func() bool {
		pa := h.pa("rev-1")
		return pa.Status.ServiceName == "rev-1" && pa.Status.MetricsServiceName == "rev-1-private" &&
			cond(pa, knautoscaling.ConditionSKSReady) == "True" && scaleOf(pa.Status.ActualScale) == 1 &&
			cond(pa, knautoscaling.ConditionScaleTargetInitialized) == "True" && cond(pa, knautoscaling.ConditionActive) == "True" &&
			cond(pa, knautoscaling.ConditionReady) == "True"
	})

	// A decision scales the Deployment and puts the SKS in Serve mode.
	seq := uint64(time.Now().UnixMilli())
	res := h.scale("rev-1", seq, 3, 5)
	if !res.Changed || res.Applied != 3 || res.Previous != 1 {
		t.Errorf("Scale = %+v, want 1 → 3 changed", res)
	}
	if got := h.replicas("rev-1"); got != 3 {
		t.Errorf("deployment replicas = %d, want 3", got)
	}
	h.eventually("sks in Serve mode", func() bool { return h.sks("rev-1").Spec.Mode == knnetworking.ModeServe })
	if pa := h.pa("rev-1"); scaleOf(pa.Status.DesiredScale) != 3 || lastDecision(pa) == nil || lastDecision(pa).Sequence != int64(seq) {
		t.Errorf("status desiredScale %d, decision %+v; want 3 and sequence %d", scaleOf(pa.Status.DesiredScale), lastDecision(pa), seq)
	}
	h.eventually("actualScale 3", func() bool { return scaleOf(h.pa("rev-1").Status.ActualScale) == 3 })

	// An older decision is refused and changes nothing.
	if res := h.scale("rev-1", seq-1, 1, 0); !res.Stale || res.Applied != 3 {
		t.Errorf("older decision: %+v, want stale at 3", res)
	}
	h.eventually("stale event", func() bool { return len(h.eventMessages("rev-1", EventStaleDecision)) > 0 })

	// Nothing changed: a reconcile writes nothing.
	before := h.pa("rev-1").ResourceVersion
	h.reconcile("rev-1")
	if after := h.pa("rev-1").ResourceVersion; after != before {
		t.Errorf("a reconcile with nothing changed wrote the podautoscaler (resourceVersion %s → %s)", before, after)
	}

	// No traffic after a whole stable window: inactive, Proxy mode, pods
	// kept until the activator is in the path and the grace period passed.
	h.clock.SetTime(h.clock.Now().Add(kpaconfig.Default().StableWindow + time.Second))
	h.scale("rev-1", seq+1, 0, 5)
	h.eventually("inactive and Proxy", func() bool {
		return cond(h.pa("rev-1"), knautoscaling.ConditionActive) == "False/NoTraffic" && h.sks("rev-1").Spec.Mode == knnetworking.ModeProxy
	})
	if got := h.replicas("rev-1"); got != 3 {
		t.Errorf("replicas right after going inactive = %d, want 3", got)
	}
	h.serveSKS("rev-1") // the activator endpoints are in the SKS now
	h.clock.SetTime(h.clock.Now().Add(kpaconfig.Default().ScaleToZeroGracePeriod + time.Second))
	// The activator does not answer yet (the probe reaches the pods): the
	// pods stay, and the reconcile asks to run again soon.
	if out := h.reconcile("rev-1"); out.Patched || out.Requeue <= 0 || out.Requeue > probeRetry {
		t.Errorf("reconcile with the activator not in the path: %+v, want no patch and a requeue within %s", out, probeRetry)
	}
	if got := h.replicas("rev-1"); got != 3 {
		t.Errorf("replicas before the activator answers = %d, want 3", got)
	}
	h.act.inPath.Store(true)
	h.eventually("scaled to zero", func() bool {
		h.reconcile("rev-1")
		return h.replicas("rev-1") == 0
	})
	wantProbe := "rev-1." + h.ns + ".svc.cluster.local:80/healthz activator"
	if got := h.act.seen(); !slices.Contains(got, wantProbe) {
		t.Errorf("activator probes = %q, want %q among them", got, wantProbe)
	}
	h.eventually("scaled event", func() bool {
		return slices.ContainsFunc(h.eventMessages("rev-1", EventScaled), func(m string) bool {
			return strings.HasPrefix(m, "3 → 0") && strings.Contains(m, "activator answered")
		})
	})
	if pa := h.pa("rev-1"); scaleOf(pa.Status.DesiredScale) != 0 || h.sks("rev-1").Spec.Mode != knnetworking.ModeProxy {
		t.Errorf("at zero: desiredScale %d, sks mode %s; want 0 and Proxy", scaleOf(pa.Status.DesiredScale), h.sks("rev-1").Spec.Mode)
	}

	// A request reaches the activator: the decider wants a pod with no
	// burst capacity yet. The Deployment leaves zero at once, the activator
	// stays in the path, and the PodAutoscaler is active once the pod is
	// ready.
	if res := h.scale("rev-1", seq+2, 1, -10); !res.Changed || res.Applied != 1 {
		t.Errorf("Scale from zero = %+v, want 0 → 1", res)
	}
	if got := h.replicas("rev-1"); got != 1 {
		t.Errorf("replicas after the first request = %d, want 1", got)
	}
	if got := h.sks("rev-1").Spec.Mode; got != knnetworking.ModeProxy {
		t.Errorf("sks mode with negative excess burst capacity = %s, want Proxy", got)
	}
	h.eventually("active again with one ready pod", func() bool {
		pa := h.pa("rev-1")
		return cond(pa, knautoscaling.ConditionActive) == "True" && scaleOf(pa.Status.ActualScale) == 1 && cond(pa, knautoscaling.ConditionReady) == "True"
	})
}

// TestOtherClassLeftAlone: a PodAutoscaler of Knative's HPA class gets no
// SKS, no status and no decisions from tidal; the tidal class is taken only
// when configured.
func TestOtherClassLeftAlone(t *testing.T) {
	h := newHarness(t, knautoscaling.ClassKPA, knautoscaling.ClassTidal)
	h.revision("hpa-1", knautoscaling.ClassHPA, 1)
	h.revision("tidal-1", knautoscaling.ClassTidal, 1)
	h.eventually("tidal-class SKS", func() bool { return h.sks("tidal-1") != nil })
	target := scale.Target{Namespace: h.ns, Name: "hpa-1", APIVersion: "apps/v1", Kind: "Deployment"}
	if ok, err := h.ctrl.Handles(target); ok || err != nil {
		t.Errorf("Handles(hpa-1) = %v, %v; want false", ok, err)
	}
	if ok, err := h.ctrl.Handles(scale.Target{Namespace: h.ns, Name: "tidal-1", APIVersion: "apps/v1", Kind: "Deployment"}); !ok || err != nil {
		t.Errorf("Handles(tidal-1) = %v, %v; want true", ok, err)
	}
	// The controller has seen both (the tidal one's SKS exists); give the
	// HPA one as long again.
	time.Sleep(time.Second)
	if s := h.sks("hpa-1"); s != nil {
		t.Errorf("hpa-class podautoscaler got a ServerlessService: %+v", s.Spec)
	}
	if pa := h.pa("hpa-1"); len(pa.Status.Conditions) != 0 || pa.Status.ObservedGeneration != 0 {
		t.Errorf("hpa-class podautoscaler status written: %+v", pa.Status)
	}
	if _, err := h.ctrl.Scale(context.Background(), podautoscaler.Request{Decision: scale.Decision{Target: target, Desired: 2, Sequence: 1}}); err == nil {
		t.Errorf("Scale of an hpa-class target succeeded, want an error")
	}
}

// TestBounds: what the controller keeps per PodAutoscaler beyond its
// informer's copy. PodAutoscalers of another class cost nothing else (no
// pod selector, no overlay entry, no ServerlessService); the controller's
// own leave nothing behind once deleted.
func TestBounds(t *testing.T) {
	h := newHarness(t)
	const others, mine = 1000, 50
	create := func(prefix, class string, n int) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 8)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				name := fmt.Sprintf("%s-%d", prefix, i)
				pa := &knautoscaling.PodAutoscaler{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{knautoscaling.LabelRevision: name}},
					Spec: knautoscaling.PodAutoscalerSpec{
						ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
						ProtocolType:   knautoscaling.ProtocolHTTP1,
					},
				}
				if class != "" {
					pa.Annotations = map[string]string{knautoscaling.AnnotationClass: class}
				}
				_, err := h.kn.PodAutoscalers(h.ns).Create(context.Background(), pa, metav1.CreateOptions{})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The controller watches every namespace of the shared cluster: the
	// PodAutoscalers of earlier tests stay until the namespace controller
	// has deleted their namespaces, and one of them counted here made this
	// test fail now and then ("pod selectors kept ... 1").
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(h.kind.paInformer.GetStore().ListKeys()) == 0 && h.selectors() == 0, nil
	})
	if err != nil {
		t.Fatalf("earlier tests' PodAutoscalers still cached: %v", h.kind.paInformer.GetStore().ListKeys()[:min(5, len(h.kind.paInformer.GetStore().ListKeys()))])
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	create("hpa", knautoscaling.ClassHPA, others)
	h.eventually("hpa-class PodAutoscalers cached", func() bool { return len(h.kind.paInformer.GetStore().ListKeys()) == others })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perPA := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / others
	t.Logf("heap per cached PodAutoscaler of another class: %d bytes", perPA)
	if perPA > 16<<10 {
		t.Errorf("heap per cached PodAutoscaler of another class = %d bytes, want under 16 KiB", perPA)
	}
	if n := h.selectors(); n != 0 {
		t.Errorf("pod selectors kept for PodAutoscalers of another class: %d", n)
	}
	list, err := h.kn.ServerlessServices(h.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d ServerlessServices for PodAutoscalers of another class", len(list.Items))
	}

	create("kpa", "", mine)
	h.eventually("the KPA-class PodAutoscalers reconciled", func() bool { return h.selectors() == mine })
	if err := h.kn.PodAutoscalers(h.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("nothing kept for deleted PodAutoscalers", func() bool {
		return h.selectors() == 0 && h.writes() == 0 && len(h.kind.paInformer.GetStore().ListKeys()) == 0
	})
}

// TestRefusals: a ServerlessService of the PodAutoscaler's name that
// something else controls is left alone and the PodAutoscaler says so
// (Knative's NotOwned); an annotation that does not parse is reported the
// same way, and nothing is scaled.
func TestRefusals(t *testing.T) {
	h := newHarness(t)
	foreign := &knnetworking.ServerlessService{
		ObjectMeta: metav1.ObjectMeta{Name: "taken"},
		Spec: knnetworking.ServerlessServiceSpec{Mode: knnetworking.ModeServe, ProtocolType: "http1",
			ObjectRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "other"}},
	}
	if _, err := h.kn.ServerlessServices(h.ns).Create(context.Background(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("foreign SKS cached", func() bool {
		s, _ := knclient.Get[*knnetworking.ServerlessService](h.kind.sksInformer.GetStore(), h.ns, "taken")
		return s != nil
	})
	h.revision("taken", "", 1)
	h.eventually("NotOwned", func() bool {
		pa := h.pa("taken")
		return cond(pa, knautoscaling.ConditionActive) == "False/NotOwned" && cond(pa, knautoscaling.ConditionReady) == "False/NotOwned"
	})
	if s := h.sks("taken"); s.Spec.Mode != knnetworking.ModeServe || len(s.OwnerReferences) != 0 {
		t.Errorf("foreign SKS changed: %+v %v", s.Spec, s.OwnerReferences)
	}
	h.eventually("NotOwned event", func() bool { return len(h.eventMessages("taken", EventNotOwned)) > 0 })

	h.revision("bad", "", 1)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pa := h.pa("bad")
		pa.Annotations = map[string]string{kpaconfig.AnnotationMinScale: "lots"}
		_, err := h.kn.PodAutoscalers(h.ns).Update(context.Background(), pa, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("InvalidSpec", func() bool {
		pa := h.pa("bad")
		c := pa.Status.Get(knautoscaling.ConditionActive)
		return c != nil && c.Reason == reasonInvalidSpec && strings.Contains(c.Message, "min-scale")
	})
	if _, err := h.ctrl.Scale(context.Background(), podautoscaler.Request{Decision: scale.Decision{
		Target: scale.Target{Namespace: h.ns, Name: "bad", APIVersion: "apps/v1", Kind: "Deployment"}, Desired: 3, Sequence: uint64(time.Now().UnixMilli())}}); !errors.Is(err, podautoscaler.ErrInvalidPodAutoscaler) {
		t.Errorf("Scale of an invalid PodAutoscaler's target: %v, want ErrInvalidPodAutoscaler", err)
	}
	if got := h.replicas("bad"); got != 1 {
		t.Errorf("replicas of an invalid PodAutoscaler's target = %d, want 1", got)
	}
}
