package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/knative/knactivator"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestMigrationHelmInstallToUninstall is docs/knative.md's "Migrating from
// Knative's autoscaler" and its way back, step by step, on one cluster:
// Knative Serving v0.50.0's own autoscaler (its Deployment and Service from
// serving-core's config/core/deployments/autoscaler.yaml, its binary as the
// Deployment's process) scales a Revision; the pinned Helm installs
// charts/tidal in Knative mode, idle, next to it (step 2, with step 1's
// values read from config-autoscaler); the switch (step 3) scales Knative's
// autoscaler to zero, deletes its Service and upgrades the release, after
// which tidal's actuator alone writes the PodAutoscaler's status as the load
// falls; then `helm uninstall`, the release namespace deleted, Knative's
// manifest applied again and its autoscaler scaled back to one: it takes
// the PodAutoscaler back and scales the Revision up on load and down.
//
// The chart's Deployments run as processes (their pods are kwok's): each
// with its container's TIDAL_* environment as flags, the chart's ConfigMaps
// as files and its ServiceAccount's token (test/chart/release), started
// when Helm has rolled them out and stopped when Helm deletes them; only
// the addresses a cluster's Services would give are loopback ones. TLS is
// off (tls.mode=disabled): the processes run on loopback without the
// pods' mounted certificates.
func TestMigrationHelmInstallToUninstall(t *testing.T) {
	ctx := context.Background()
	s := startKnativeScene(t)
	c := s.c
	manifest := knativeAutoscalerManifest(ctx, t)
	knApply(ctx, t, s, manifest)
	wrapper := filepath.Join(t.TempDir(), "autoscaler")
	withHosts(t, s.knBins.Autoscaler, wrapper, s.hosts())
	knStats := fmt.Sprintf("ws://127.0.0.1:%d", autoscalerStatsPort)
	ka, knAct := runKnativeAutoscaler(ctx, t, s, wrapper, knStats, "activator-before")

	// Knative's autoscaler in charge: it scales the Revision up on load.
	s.createService(t, nil)
	s.waitRevisionReady(t)
	up := kpaWant(32 * serviceTime.Seconds())
	s.rate.Set(32)
	s.reps.waitReady(t, ka, up, 90*time.Second, "Knative: step up")
	t.Logf("Knative's autoscaler scaled the Revision to %d pods", up)

	// 1. The Knative configuration as values: config-autoscaler's keys
	// under config.autoscaler, config-deployment's progress-deadline if set.
	relNS := c.Namespace(t)
	values := migrationValues(ctx, t, s)

	// 2. tidal, idle, next to Knative's autoscaler.
	const name = "tidal"
	helmOn(t, s, "install", name, "charts/tidal", "-n", relNS, "--create-namespace", "-f", values,
		"--set", "knative.enabled=true", "--set", "knative.classes={kpa.autoscaling.tidal.dev}",
		"--set", "knative.autoscalerService.create=false", "--set", "networkPolicy.enabled=true",
		"--set", "tls.mode=disabled", "--wait", "--timeout", "2m")
	binDir := actuatorWithHosts(t, s.tidalDir, s.hosts())
	idle := startRelease(ctx, t, s, name, relNS, binDir)
	// Idle: Knative's objects untouched (the PodAutoscaler has no status
	// of tidal's), Knative's autoscaler still holding the Revision.
	pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := managers(pa.ManagedFields, "status"); slices.ContainsFunc(w, func(m string) bool { return !notTidal(m) }) || pa.Status.Annotations[decisionAnnotation] != "" {
		t.Errorf("idle tidal wrote the PodAutoscaler's status (writers %q, decision %q)", w, pa.Status.Annotations[decisionAnnotation])
	}

	// 3. The switch.
	scaleKnativeAutoscaler(ctx, t, s, 0)
	ka.stop(t) // its pod goes with the replicas
	_ = knAct.Conn.Shutdown()
	// Knative's autoscaler writes nothing from here on. What it wrote up to
	// its exit is before switchAt (managedFields keep whole seconds) and
	// before kept, a reading of the Revision's replicas taken a moment
	// after it (a write it sent as it stopped has landed by then).
	stopped := time.Now()
	switchAt := stopped.Truncate(time.Second).Add(time.Second)
	kept := s.reps.after(t, stopped.Add(300*time.Millisecond))
	if err := c.Client.CoreV1().Services(systemNamespace).Delete(ctx, "autoscaler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	helmOn(t, s, "upgrade", name, "charts/tidal", "-n", relNS, "--reuse-values",
		"--set", "knative.classes={kpa.autoscaling.knative.dev}", "--set", "knative.autoscalerService.create=true",
		"--wait", "--timeout", "2m")
	// Helm made the Service the activators dial, naming the collectors.
	svc, err := c.Client.CoreV1().Services(systemNamespace).Get(ctx, "autoscaler", metav1.GetOptions{})
	if want := name + "-autoscaler." + relNS + ".svc.cluster.local"; err != nil || svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName != want {
		t.Fatalf("after the upgrade: Service %s/autoscaler %+v (%v), want an ExternalName %s", systemNamespace, svc, err, want)
	}
	// Until tidal takes over, no one reconciles: the Revision keeps its
	// scale.
	if lo, hi := s.reps.bounds(kept.at); lo != kept.spec || hi != kept.spec {
		t.Errorf("through the switch the Revision's replicas went %d to %d, want them kept at %d", lo, hi, kept.spec)
	}
	// The rollout replaces the pods: the processes restart with the
	// upgraded Deployments' settings, and the activators reconnect.
	idle.stop(t)
	tidal := startRelease(ctx, t, s, name, relNS, binDir)
	act := knactivator.Start(t, "ws://"+tidal.wsAddr, "activator-tidal")
	act.WaitReady(t, 30*time.Second)
	s.front.useActivator(act.Handler())

	// tidal decides: the load falls and tidal's actuator scales the
	// Revision down and writes the status, Knative's autoscaler nothing
	// since the switch.
	down := kpaWant(10 * serviceTime.Seconds())
	s.rate.Set(10)
	s.reps.waitReady(t, s.kc, down, 90*time.Second, "tidal: step down")
	eventually(t, s.kc, 30*time.Second, "the PodAutoscaler's status tidal's alone since the switch", func() (bool, string) {
		pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pa.IsReady() && pa.Status.DesiredScale != nil && *pa.Status.DesiredScale == down &&
				pa.Status.Annotations[decisionAnnotation] != "" && wroteSince(pa.ManagedFields, "status", switchAt, false),
			fmt.Sprintf("status %+v, writers %s", pa.Status, writerTimes(pa.ManagedFields, "status"))
	})
	d, err := c.Client.AppsV1().Deployments(s.ns).Get(ctx, s.rev+"-deployment", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// spec.replicas has one owner, its last writer (the API server keeps
	// no time for writes through /scale).
	if w := managers(d.ManagedFields, "scale"); !slices.Equal(w, []string{actuatorManager}) {
		t.Errorf("the Deployment's scale last written by %q, want tidal-actuator", w)
	}
	t.Logf("tidal: %d → %d pods, the PodAutoscaler's status written by tidal-actuator", up, down)

	// The way back: helm uninstall (the Service in knative-serving goes
	// with the release), the release namespace deleted with the bucket
	// Leases, Knative's manifest applied again, its autoscaler at one.
	helmOn(t, s, "uninstall", name, "-n", relNS, "--wait", "--timeout", "2m")
	tidal.stop(t) // Helm deleted the pods
	_ = act.Conn.Shutdown()
	if _, err := c.Client.CoreV1().Services(systemNamespace).Get(ctx, "autoscaler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall: Service %s/autoscaler: %v, want it deleted", systemNamespace, err)
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, relNS, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, s.kc, 90*time.Second, "the release namespace gone", func() (bool, string) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, relNS, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	checkNothingWaitsOnTidal(ctx, t, s)
	backAt := time.Now().Truncate(time.Second)
	knApply(ctx, t, s, manifest)
	scaleKnativeAutoscaler(ctx, t, s, 1)
	ka, _ = runKnativeAutoscaler(ctx, t, s, wrapper, knStats, "activator-after")

	// Knative's autoscaler takes the PodAutoscaler back: its Metric, and
	// it scales up on load, then down, writing the status.
	eventually(t, ka, 60*time.Second, "Knative's Metric for the Revision", func() (bool, string) {
		m, err := s.sc.AutoscalingV1alpha1().Metrics(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(m, pa), fmt.Sprintf("owners %+v", m.OwnerReferences)
	})
	s.rate.Set(32)
	s.reps.waitReady(t, ka, up, 90*time.Second, "Knative, back: step up")
	s.rate.Set(10)
	s.reps.waitReady(t, ka, down, 90*time.Second, "Knative, back: step down")
	eventually(t, ka, 30*time.Second, "the PodAutoscaler's status Knative's since the way back", func() (bool, string) {
		pa, err := s.sc.AutoscalingV1alpha1().PodAutoscalers(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pa.IsReady() && pa.Status.DesiredScale != nil && *pa.Status.DesiredScale == down && wroteSince(pa.ManagedFields, "status", backAt, true),
			fmt.Sprintf("status %+v, writers %s", pa.Status, writerTimes(pa.ManagedFields, "status"))
	})
	d, err = c.Client.AppsV1().Deployments(s.ns).Get(ctx, s.rev+"-deployment", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := managers(d.ManagedFields, "scale"); len(w) == 0 || slices.ContainsFunc(w, func(m string) bool { return !notTidal(m) }) {
		t.Errorf("the Deployment's scale last written by %q, want Knative's autoscaler", w)
	}
	t.Logf("Knative's autoscaler, back: %d → %d → %d pods", down, up, down)
}

// wroteSince reports whether, among the writers of subresource, someone
// wrote at or after since, and only Knative (knative true) or only tidal's
// services (false) did.
func wroteSince(entries []metav1.ManagedFieldsEntry, subresource string, since time.Time, knative bool) bool {
	wrote := false
	for _, e := range entries {
		if e.Subresource != subresource || e.FieldsV1 == nil || e.Time == nil || e.Time.Time.Before(since) {
			continue
		}
		if notTidal(e.Manager) != knative {
			return false
		}
		wrote = true
	}
	return wrote
}

// writerTimes lists subresource's writers with the time of their last
// write, for failure messages.
func writerTimes(entries []metav1.ManagedFieldsEntry, subresource string) string {
	var out []string
	for _, e := range entries {
		if e.Subresource == subresource && e.Time != nil {
			out = append(out, e.Manager+"@"+e.Time.Format(time.TimeOnly))
		}
	}
	return fmt.Sprint(out)
}

// helmOn runs the pinned Helm against the scene's cluster.
func helmOn(t *testing.T, s *scene, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from := time.Now()
	if _, err := rel.Helm(ctx, s.c.Kubeconfig, args...); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm %s: %s", args[0], time.Since(from).Round(100*time.Millisecond))
}

// knativeAutoscalerManifest is Knative's autoscaler Deployment and Service,
// as serving-core.yaml ships them (config/core/deployments/autoscaler.yaml).
func knativeAutoscalerManifest(ctx context.Context, t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dirs, err := moduleDirs(ctx, "knative.dev/serving")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dirs["knative.dev/serving"], "config/core/deployments/autoscaler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := rel.Decode(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// knApply applies Knative's manifest, as `kubectl apply -f serving-core.yaml`
// does, and deletes what it made when t ends (other tests of the binary run
// Knative's autoscaler with no Service).
func knApply(ctx context.Context, t *testing.T, s *scene, objs []*unstructured.Unstructured) {
	t.Helper()
	a, err := rel.NewApplier(s.c.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := a.Apply(ctx, o, false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Delete(context.Background(), o) })
	}
}

// scaleKnativeAutoscaler is `kubectl -n knative-serving scale deployment
// autoscaler --replicas=n`.
func scaleKnativeAutoscaler(ctx context.Context, t *testing.T, s *scene, n int32) {
	t.Helper()
	deps := s.c.Client.AppsV1().Deployments(systemNamespace)
	sc := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "autoscaler", Namespace: systemNamespace}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	if _, err := deps.UpdateScale(ctx, "autoscaler", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scale Knative's autoscaler to %d: %v", n, err)
	}
}

// runKnativeAutoscaler runs Knative's autoscaler binary as its
// Deployment's pod, waits until it leads its buckets, and connects
// Knative's activator code to it (the autoscaler Service's address).
func runKnativeAutoscaler(ctx context.Context, t *testing.T, s *scene, wrapper, stats, activator string) (*knProcess, *knactivator.Activator) {
	t.Helper()
	ka := startAutoscaler(t, wrapper, s.c)
	ka.waitLeader(ctx, t, s.c, "autoscaler-bucket", time.Minute)
	act := knactivator.Start(t, stats, activator)
	act.WaitReady(t, 30*time.Second)
	s.front.useActivator(act.Handler())
	return ka, act
}

// migrationValues is step 1: config-autoscaler's keys (but Knative's
// _example) under config.autoscaler and config-deployment's
// progress-deadline, if set, under config.deployment, in a values file.
func migrationValues(ctx context.Context, t *testing.T, s *scene) string {
	t.Helper()
	cms := s.c.Client.CoreV1().ConfigMaps(systemNamespace)
	as, err := cms.Get(ctx, "config-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := cms.Get(ctx, "config-deployment", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	autoscaler := map[string]string{}
	for k, v := range as.Data {
		if k != "_example" {
			autoscaler[k] = v
		}
	}
	config := map[string]any{"autoscaler": autoscaler}
	if pd, ok := dep.Data["progress-deadline"]; ok {
		config["deployment"] = map[string]string{"progress-deadline": pd}
	}
	b, err := json.Marshal(map[string]any{"config": config})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "knative-values.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartRelease is a release's three Deployments run as processes.
type chartRelease struct {
	procs  []*system.Proc
	wsAddr string // the collector's activator endpoint
}

// startRelease runs the installed release's Deployments (`helm get
// manifest`) as processes from binDir: each with its container's TIDAL_*
// environment as flags, the release's ConfigMaps as files, the collector
// and the actuator under their ServiceAccounts' tokens; loopback addresses
// stand for the decider and actuator Services and the collector's :8080.
// They stop when t ends, if not before.
func startRelease(ctx context.Context, t *testing.T, s *scene, name, ns, binDir string) *chartRelease {
	t.Helper()
	out, err := rel.Helm(ctx, s.c.Kubeconfig, "get", "manifest", name, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := rel.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	full := rel.Options{Name: name}.Fullname()
	dir := t.TempDir()
	dirs, err := rel.ConfigDirs(dir, objs, full)
	if err != nil {
		t.Fatal(err)
	}
	r := &chartRelease{wsAddr: testkit.FreeAddr(t)}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range r.procs {
				testkit.KeepLog(t, "release "+p.Name, p.LogTail(1<<20))
			}
		}
		r.stop(t)
	})
	args := func(comp string, drop ...string) []string {
		dep, err := rel.Deployment(objs, full+"-"+comp)
		if err != nil {
			t.Fatal(err)
		}
		a := rel.ChartArgs(dep, dirs, drop...)
		if comp == "decider" {
			return a
		}
		acc, err := rel.NewAccount(ctx, s.c, ns, dep.Spec.Template.Spec.ServiceAccountName, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(dir, comp+".kubeconfig")
		if err := acc.WriteKubeconfig(kc); err != nil {
			t.Fatal(err)
		}
		return append(a, "--kubeconfig="+kc)
	}
	start := func(comp string, a []string) *system.Proc {
		p, err := system.NewProc(comp, binDir, comp, dir, a...)
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, p)
		if err := p.Start(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		return p
	}
	act := start("actuator", args("actuator"))
	dec := start("decider", append(args("decider", "TIDAL_ACTUATOR_ADDR"), "--actuator-addr="+act.GRPCAddr))
	start("collector", append(args("collector", "TIDAL_DECIDER_SERVICE", "TIDAL_ACTIVATOR_LISTEN"),
		"--decider-addr="+dec.GRPCAddr, "--activator-listen="+r.wsAddr))
	return r
}

// stop stops the processes, the collector first.
func (r *chartRelease) stop(t *testing.T) {
	t.Helper()
	for i := len(r.procs) - 1; i >= 0; i-- {
		if p := r.procs[i]; p.Running() {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Errorf("stop %s: %v", p.Name, err)
			}
		}
	}
}
