package chart_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
	"github.com/tidalscale/tidal/test/workload"
)

// serviceBinDir builds the three services as test/system does, once.
var serviceBinDir struct {
	dir string
	err error
	log bytes.Buffer
	ok  bool
}

func systemBinaries(t *testing.T) string {
	t.Helper()
	if !serviceBinDir.ok {
		serviceBinDir.ok = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		serviceBinDir.dir, serviceBinDir.err = system.BuildTemp(ctx, &serviceBinDir.log)
	}
	if serviceBinDir.err != nil {
		t.Fatalf("build: %v\n%s", serviceBinDir.err, serviceBinDir.log.String())
	}
	return serviceBinDir.dir
}

// forbidden matches an API server's refusal in a service's log.
var forbidden = regexp.MustCompile(`(?i)forbidden|cannot (get|list|watch|create|update|patch|delete) resource`)

// refusedLine reports whether a service's log line is an API server's refusal
// of its account. The NamespaceLifecycle admission's Forbidden for a
// namespace being deleted is not: services that watch every namespace of
// the shared test cluster meet other tests' namespaces as they go.
func refusedLine(line string) bool {
	return forbidden.MatchString(line) && !strings.Contains(line, "because it is being terminated")
}

// TestServicesUnderTheirAccounts runs the three services as local processes,
// the collector and the actuator each with a kubeconfig holding only its
// own ServiceAccount's token (from the TokenRequest API, as a pod gets it),
// configured as the chart configures them (bucket Leases in the release
// namespace), and drives the closed loop through both strategies:
//   - KPA: a load step scales a Deployment up to the pods it needs, and
//     removing the load scales it back to zero;
//   - lag: a Function is deployed by the actuator's Deployer and scaled on
//     its topic's lag, and a PodAutoscaler whose brokers sit in a Secret is
//     measured by a collector that may read only that Secret.
//
// Any refusal by the API server would stall the loop or show in a log: the
// test requires the scale changes and no "forbidden" in any log. That is the
// proof the chart's RBAC is enough.
func TestServicesUnderTheirAccounts(t *testing.T) {
	f := newRBACFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leasePrefix := f.release + "-tidal-collector"
	args, err := f.accounts.SystemArgs(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	s, err := system.Start(ctx, system.Options{
		BinDir:     systemBinaries(t),
		Cluster:    f.c,
		Kafka:      true,
		Collectors: 2,
		// A short grace so the idle Deployment reaches zero in seconds.
		AutoscalerConfig: map[string]string{"scale-to-zero-grace-period": "6s"},
		// The chart's accounts and Lease namespace (a later flag wins over
		// test/system's admin kubeconfig).
		Args: args,
		Log:  testLog{t},
	})
	if err != nil {
		t.Fatalf("start system: %v", err)
	}
	defer func() {
		logs := readLogs(t, s.LogDir)
		for name, text := range logs {
			var refused []string
			for _, line := range strings.Split(text, "\n") {
				if refusedLine(line) {
					refused = append(refused, line)
				}
			}
			if len(refused) > 0 {
				t.Errorf("%s was refused by the API server %d times; first:\n%s", name, len(refused), strings.Join(refused[:min(3, len(refused))], "\n"))
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

	t.Run("kpa", func(t *testing.T) {
		load := system.NewDial(300) // concurrency 30 at 100ms a request
		k, err := s.StartKPA(ctx, system.KPAOptions{
			Namespace: f.wns, Name: "web", Replicas: 1, Profile: load,
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
		want := int32(math.Ceil(300 * 0.1 / 7)) // 5 pods of 7 in flight each
		waitReplicas(t, f, "web", 60*time.Second, func(n int32) bool { return n == want })
		load.Set(0)
		waitReplicas(t, f, "web", 60*time.Second, func(n int32) bool { return n == 0 })
		// The actuator recorded status and Events under its own name.
		pa, err := f.admin.Resource(podAutoscalersGVR).Namespace(f.wns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, found, _ := unstructured.NestedInt64(pa.Object, "status", "desiredScale"); !found {
			t.Errorf("PodAutoscaler status has no desiredScale: %v", pa.Object["status"])
		}
		evs, err := f.c.Client.CoreV1().Events(f.wns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fromActuator := 0
		for _, e := range evs.Items {
			if e.Source.Component == "tidal-actuator" {
				fromActuator++
			}
		}
		if fromActuator == 0 {
			t.Errorf("no Event from tidal-actuator in %s", f.wns)
		}
	})

	t.Run("lag", func(t *testing.T) {
		// A Function: the Deployer creates its Deployment and lag
		// PodAutoscaler; its topic's backlog scales it up.
		idle := 5 * time.Second
		fn, err := s.StartFunction(ctx, system.FunctionOptions{
			Namespace: f.wns, Name: "upper", Topic: "words", Partitions: 3, IdleTimeout: &idle,
			Produce: system.NewDial(200), RatePerPod: 40, ColdStart: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer fn.Stop()
		waitReplicas(t, f, "upper", 90*time.Second, func(n int32) bool { return n >= 2 })

		// A PodAutoscaler whose brokers are in the Secret the collector was
		// given: a backlog with no consumer scales the Deployment up.
		sec, err := f.c.Client.CoreV1().Secrets(f.wns).Get(ctx, brokersSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data = map[string][]byte{"brokers": []byte(strings.Join(s.Brokers, ","))}
		if _, err := f.c.Client.CoreV1().Secrets(f.wns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTopic(ctx, "backlog", 2); err != nil {
			t.Fatal(err)
		}
		prod, err := workload.StartProducer(workload.ProducerOptions{Brokers: s.Brokers, Topic: "backlog", Profile: system.NewDial(50)})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Stop()
		if _, err := f.c.Client.AppsV1().Deployments(f.wns).Create(ctx, cluster.Deployment("backlog", nil, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pa := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.tidal.dev/v1alpha1", "kind": "PodAutoscaler",
			"metadata": map[string]any{"name": "backlog", "namespace": f.wns},
			"spec": map[string]any{
				"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "backlog"},
				"strategy":       "lag",
				"lag": map[string]any{
					"brokersSecretRef": map[string]any{"name": brokersSecret, "key": "brokers"},
					"topic":            "backlog", "consumerGroup": "backlog-group",
				},
			},
		}}
		if _, err := f.admin.Resource(podAutoscalersGVR).Namespace(f.wns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReplicas(t, f, "backlog", 60*time.Second, func(n int32) bool { return n >= 1 })
	})

	// The collectors shared the buckets through Leases in the release
	// namespace, under their own account.
	leases, err := f.c.Client.CoordinationV1().Leases(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, leasePrefix) && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			held++
		}
	}
	if held < 4 {
		t.Errorf("%d bucket Leases held in %s, want at least the 4 buckets", held, f.ns)
	}
}

// waitReplicas waits until the Deployment's spec.replicas satisfies ok.
func waitReplicas(t *testing.T, f *rbacFixture, name string, timeout time.Duration, ok func(int32) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last int32 = -1
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := f.c.Client.AppsV1().Deployments(f.wns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Spec.Replicas == nil {
			return false, nil //nolint:nilerr // the Deployer may not have created it yet
		}
		last = *d.Spec.Replicas
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("Deployment %s/%s: replicas %d after %s: %v", f.wns, name, last, timeout, err)
	}
	t.Logf("Deployment %s has %d replicas", name, last)
}

func readLogs(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("read %s: %v", f, err)
			continue
		}
		out[strings.TrimSuffix(filepath.Base(f), ".log")] = string(b)
	}
	return out
}

// testLog sends test/system's progress lines to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
