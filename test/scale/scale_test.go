package scale_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/scale"
	"github.com/tidalscale/tidal/test/system"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// Guard bounds. They catch regressions (a decision path that stalls, drops
// changes or falls behind), not slowness: on an idle 2-core machine a load
// change reaches spec.replicas in about 3 to 6 s (a scrape a second, half
// the 6 s stable window for the average to cross the boundary, the next
// 2 s tick, then the decider, the actuator and the API server), and `make
// test` may run other packages' clusters beside this one, which has been
// seen to double that. 20 s is three times the idle figure and still two
// thirds of the switch period, so a change that takes longer is on its way
// to being lost.
const (
	guardTargets  = 300
	guardLag      = 30
	guardDuration = 2 * time.Minute
	maxChangeLag  = 20 * time.Second
	// guardTimeout bounds the whole run: creation (seconds), the first
	// decisions (settle, 3 min at most), the steady phase and shutdown. It
	// is this test's own deadline, well inside `make unit`'s 60 min.
	guardTimeout = 15 * time.Minute
	// maxWritesPerChange bounds the actuator's API writes (status, scale,
	// Events; not Lease renewals) per applied change of spec.replicas. It
	// was 4.5 when every decision was written to status before its scale
	// write and every change had an Event; coalesced, this run measures
	// about 2.9: the scale write, a status write for most changes (the
	// targets near a level's boundary change alone, seconds apart, and
	// each change's status is due within the 3 s interval) and an Event
	// for most (most changes turn; the Event budget of 25 per object is
	// not spent in two minutes). Issue 27's goal is 1.5.
	maxWritesPerChange = 3.5
)

// TestScaleGuard runs the scale test at 300 KPA targets (1–5 pods each, a
// fifth of them switching load every 30 s) and 30 lag targets for two
// minutes, and fails when a load change is never applied before the next
// one, or is applied later than maxChangeLag, when the actuator writes more
// than maxWritesPerChange times per applied change, or writes at all to
// the objects of targets whose load never changed and whose spec.replicas
// did not move once they converged.
func TestScaleGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Kubernetes control plane and minutes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	// A cluster of its own: the API server's audit log counts every
	// client's writes to the targets' namespace.
	const ns = "scale-guard"
	cfg := scale.DefaultConfig()
	cfg.KPATargets, cfg.LagTargets, cfg.Duration = guardTargets, guardLag, guardDuration
	cfg.Settle = 3 * time.Minute
	c, err := cluster.Start(ctx, scale.ClusterOptions(cfg, ns, testWriter{t}))
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	defer c.Stop()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	var buildLog bytes.Buffer
	binDir, err := system.BuildTemp(ctx, &buildLog)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, buildLog.String())
	}
	t.Cleanup(func() { _ = os.RemoveAll(binDir) })

	rep, err := scale.Run(ctx, cfg, scale.Env{Cluster: c, Namespace: ns, BinDir: binDir, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("scale run: %v", err)
	}
	var out bytes.Buffer
	rep.Write(&out)
	t.Logf("report:\n%s", out.String())

	// Without changes or pods the run measured nothing.
	if want := guardTargets / 10; rep.Changes < want {
		t.Errorf("load changes measured = %d, want at least %d", rep.Changes, want)
	}
	if rep.ListenErrors > 0 {
		t.Errorf("pod IPs not served = %d, want 0; first: %v", rep.ListenErrors, rep.ListenError)
	}
	if rep.Lost > 0 {
		t.Errorf("load changes never applied before the next one = %d of %d, want 0; first: %v", rep.Lost, rep.Changes, rep.LostExamples)
	}
	if rep.MoveMax > maxChangeLag {
		t.Errorf("load change → spec.replicas max = %v (p99 %v), want at most %v", rep.MoveMax, rep.MoveP99, maxChangeLag)
	}
	// Writes, from the API server's audit log.
	if rep.Writes.Error != "" {
		t.Fatalf("writes not measured: %s", rep.Writes.Error)
	}
	if rep.Writes.Applied < guardTargets/10 {
		t.Errorf("changes of spec.replicas applied = %d, want at least %d", rep.Writes.Applied, guardTargets/10)
	}
	if got := rep.Writes.PerChange[scale.ActuatorAgent]; got > maxWritesPerChange {
		t.Errorf("actuator writes per applied change = %.2f (%v), want at most %.1f", got, rep.Writes.ByKind, maxWritesPerChange)
	}
	// A target whose load never changed may still move when the decider's
	// desired scale does (near a level's boundary): those are changes,
	// each applied. Decisions that change nothing cost nothing.
	if u := rep.Unchanged; u.Targets-u.NotAtLevel-u.Moved == 0 || u.QuietWrites > 0 {
		t.Errorf("actuator writes to the %d targets whose load never changed and whose spec.replicas did not move = %d, want 0 (all of them: %d, %v)",
			u.Targets-u.NotAtLevel-u.Moved, u.QuietWrites, u.ActuatorWrites, u.ActuatorKinds)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
