package knativeconfig

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/gathered"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func TestParseNetwork(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want MeshMode
		err  string
	}{
		{"absent", nil, MeshAuto, ""},
		{"enabled", map[string]string{KeyMeshCompatibilityMode: "enabled"}, MeshEnabled, ""},
		{"case and space", map[string]string{KeyMeshCompatibilityMode: " Disabled "}, MeshDisabled, ""},
		{"auto", map[string]string{KeyMeshCompatibilityMode: "AUTO"}, MeshAuto, ""},
		{"other keys ignored", map[string]string{"ingress-class": "kourier.ingress.networking.knative.dev"}, MeshAuto, ""},
		{"typo", map[string]string{KeyMeshCompatibilityMode: "enable"}, "", `mesh-compatibility-mode "enable": want enabled, disabled or auto`},
		{"long value cut", map[string]string{KeyMeshCompatibilityMode: strings.Repeat("x", 1000)}, "", "… (1000 bytes)"},
		{"pod addressability", map[string]string{KeyEnableMeshPodAddressability: "true", KeyMeshCompatibilityMode: "auto"}, MeshAuto, ""},
		{"pod addressability off", map[string]string{KeyEnableMeshPodAddressability: "FALSE"}, MeshAuto, ""},
		{"pod addressability typo", map[string]string{KeyEnableMeshPodAddressability: "yes"}, "", `enable-mesh-pod-addressability "yes": want true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNetwork(tc.data)
			if tc.err != "" {
				var ke *kpaconfig.KeyError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ke) {
					t.Fatalf("ParseNetwork: %v, want a KeyError containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got.MeshCompatibilityMode != tc.want || got.EnableMeshPodAddressability != (tc.data[KeyEnableMeshPodAddressability] == "true") {
				t.Fatalf("ParseNetwork = %+v, %v; want %s, pod addressability only for \"true\"", got, err, tc.want)
			}
		})
	}
}

// watched is a Watcher running against the test cluster for one test, in
// a namespace of its own standing for knative-serving.
type watched struct {
	*Watcher
	kube    kubernetes.Interface
	ns      string
	reg     *prometheus.Registry
	changes atomic.Int32
}

func startWatcher(t *testing.T, base Snapshot) *watched {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	// A scheme that knows no ConfigMap, as the actuator's knows tidal's
	// types alone: the Event must not depend on it.
	recorder := broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "knativeconfig-test"})
	reg := prometheus.NewRegistry()
	w, err := New(Options{Namespace: ns, Base: base, MetricPrefix: "test", Recorder: recorder}, c.Client, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	tw := &watched{Watcher: w, kube: c.Client, ns: ns, reg: reg}
	w.OnChange(func(*Snapshot) { tw.changes.Add(1) })
	return tw
}

func (w *watched) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	w.until(t, "synced", func(*Snapshot) bool { return w.HasSynced() })
}

// until waits up to 30 s for cond on the configuration in effect.
func (w *watched) until(t *testing.T, what string, cond func(*Snapshot) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(w.Current()), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (in effect: %+v)", what, err, w.Current())
	}
}

func (w *watched) put(t *testing.T, name string, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm, err := w.kube.CoreV1().ConfigMaps(w.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Data: data}
		if _, err := w.kube.CoreV1().ConfigMaps(w.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cm.Data = data
	if _, err := w.kube.CoreV1().ConfigMaps(w.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (w *watched) metric(t *testing.T, name, configmap string) float64 {
	return gathered.Sum(t, w.reg, "test_knative_config_"+name, configmap)
}

func TestWatcherAppliesEditsAndKeepsTheLastGood(t *testing.T) {
	base := Snapshot{Autoscaler: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), Network: DefaultNetwork()}
	base.Autoscaler.StableWindow = 30 * time.Second // the flags'
	w := startWatcher(t, base)
	// config-autoscaler as Knative ships it carries an _example block.
	w.put(t, NameAutoscaler, map[string]string{"_example": strings.Repeat("# documentation\n", 600), "stable-window": "20s"})
	w.run(t)
	cur := w.Current()
	if cur.Autoscaler.StableWindow != 20*time.Second || cur.Autoscaler.EnableScaleToZero != true {
		t.Fatalf("at start: %+v, want the ConfigMap's stable window 20s over Knative's defaults", cur.Autoscaler)
	}
	if _, ok := cur.AutoscalerData["_example"]; ok || cur.AutoscalerData["stable-window"] != "20s" {
		t.Errorf("forwarded keys %v, want stable-window and no _example", cur.AutoscalerData)
	}
	if cur.DeploymentData != nil || cur.Deployment != base.Deployment || cur.Network != base.Network {
		t.Errorf("absent config-deployment and config-network: %+v, want the base's", cur)
	}

	// An edit applies, with Knative's defaults for the keys it drops.
	w.put(t, NameAutoscaler, map[string]string{"enable-scale-to-zero": "false"})
	w.until(t, "the edit", func(s *Snapshot) bool { return !s.Autoscaler.EnableScaleToZero })
	if got := w.Current().Autoscaler.StableWindow; got != kpaconfig.Default().StableWindow {
		t.Errorf("stable window %v once its key is gone, want Knative's default %v", got, kpaconfig.Default().StableWindow)
	}
	good := w.Current()

	// An invalid edit changes nothing, and is reported once per version:
	// a metric, a gauge, a Warning Event on the ConfigMap.
	changes := w.changes.Load()
	w.put(t, NameAutoscaler, map[string]string{"enable-scale-to-zero": "true", "stable-window": "2s"})
	w.until(t, "the refusal counted", func(*Snapshot) bool { return w.metric(t, "refused_total", NameAutoscaler) == 1 })
	if got := w.Current(); got != good || w.changes.Load() != changes {
		t.Errorf("after an invalid edit: %+v (%d changes), want the last good %+v", got.Autoscaler, w.changes.Load()-changes, good.Autoscaler)
	}
	if got := w.metric(t, "stale", NameAutoscaler); got != 1 {
		t.Errorf("stale{config-autoscaler} = %v, want 1", got)
	}
	var ev corev1.Event
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := w.kube.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", NameAutoscaler).String()})
		if err != nil {
			return false, err
		}
		if len(evs.Items) > 0 {
			ev = evs.Items[0]
		}
		return len(evs.Items) > 0, nil
	}); err != nil {
		t.Fatalf("no Event on %s: %v", NameAutoscaler, err)
	}
	if ev.Type != corev1.EventTypeWarning || ev.Reason != EventInvalidConfig || !strings.Contains(ev.Message, `stable-window "2s"`) {
		t.Errorf("Event %s %s %q, want a Warning %s naming the key and value", ev.Type, ev.Reason, ev.Message, EventInvalidConfig)
	}

	// A good edit after it applies and clears the gauge.
	w.put(t, NameAutoscaler, map[string]string{"stable-window": "8s"})
	w.until(t, "the good edit", func(s *Snapshot) bool { return s.Autoscaler.StableWindow == 8*time.Second })
	if got := w.metric(t, "stale", NameAutoscaler); got != 0 {
		t.Errorf("stale{config-autoscaler} = %v after a good edit, want 0", got)
	}

	// The other two, created while running; a bad config-network refused.
	w.put(t, NameDeployment, map[string]string{"progress-deadline": "120s", "queue-sidecar-image": "q"})
	w.put(t, NameNetwork, map[string]string{KeyMeshCompatibilityMode: "enabled"})
	w.until(t, "config-deployment and config-network", func(s *Snapshot) bool {
		return s.Deployment.ProgressDeadline == 120*time.Second && s.Network.MeshCompatibilityMode == MeshEnabled
	})
	w.put(t, NameNetwork, map[string]string{KeyMeshCompatibilityMode: "sometimes"})
	w.until(t, "config-network refused", func(*Snapshot) bool { return w.metric(t, "refused_total", NameNetwork) == 1 })
	if got := w.Current().Network.MeshCompatibilityMode; got != MeshEnabled {
		t.Errorf("mesh mode %s after an invalid edit, want the last good enabled", got)
	}

	// Deleting a ConfigMap keeps what it configured.
	if err := w.kube.CoreV1().ConfigMaps(w.ns).Delete(context.Background(), NameAutoscaler, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.put(t, NameDeployment, map[string]string{"progress-deadline": "60s"}) // a later event, to know the delete was seen
	w.until(t, "the later edit", func(s *Snapshot) bool { return s.Deployment.ProgressDeadline == time.Minute })
	if got := w.Current().Autoscaler.StableWindow; got != 8*time.Second {
		t.Errorf("stable window %v after config-autoscaler was deleted, want the last good 8s", got)
	}
}

func TestWatcherRefusedAtStartKeepsTheBase(t *testing.T) {
	base := Snapshot{Autoscaler: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), Network: DefaultNetwork()}
	base.Autoscaler.EnableScaleToZero = false
	w := startWatcher(t, base)
	w.put(t, NameAutoscaler, map[string]string{"max-scale-up-rate": "1"})
	w.run(t)
	if got := w.Current(); got.Autoscaler != base.Autoscaler || got.AutoscalerData != nil {
		t.Errorf("in effect %+v, want the base: the only version is invalid", got.Autoscaler)
	}
	if got := w.metric(t, "refused_total", NameAutoscaler); got != 1 {
		t.Errorf("refused_total = %v, want 1", got)
	}
}
