package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// decisionLog follows one decider's WatchDecisions for a target and keeps
// every decision by sequence, reconnecting when the stream breaks.
type decisionLog struct {
	mu        sync.Mutex
	decisions map[uint64]int32
	cancel    context.CancelFunc
	done      chan struct{}
}

func watchDecisions(t *testing.T, p *system.Proc, namespace, name string) *decisionLog {
	t.Helper()
	conn, err := p.Conn()
	if err != nil {
		t.Fatal(err)
	}
	client := deciderv1.NewDeciderServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	dl := &decisionLog{decisions: map[uint64]int32{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(dl.done)
		for ctx.Err() == nil {
			st, err := client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: namespace})
			if err == nil {
				for {
					resp, err := st.Recv()
					if err != nil {
						break
					}
					d := resp.GetDecision()
					if d.GetTarget().GetName() != name {
						continue
					}
					dl.mu.Lock()
					dl.decisions[d.GetSequence()] = d.GetDesiredReplicas()
					dl.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-dl.done; conn.Close() })
	return dl
}

// inEffect returns the desired scale of the latest decision at or before
// seq, and whether there is one.
func (dl *decisionLog) inEffect(seq uint64) (int32, uint64, bool) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	best, found := uint64(0), false
	for s := range dl.decisions {
		if s <= seq && (!found || s > best) {
			best, found = s, true
		}
	}
	return dl.decisions[best], best, found
}

// TestFaultDeciderRestart kills the decider while a target scales down and
// starts a new one at the same address: decisions resume within a tick and
// equal those of a reference decider that ran through, fed by its own
// collector from the same pods.
func TestFaultDeciderRestart(t *testing.T) {
	s := startSystem(t, system.Options{Reference: true})
	load := system.NewDial(lightLoad)
	k, rec := startKPA(t, s, load)
	ref := watchDecisions(t, s.RefDecider, k.Namespace, k.Name)

	testkit.Eventually(t, 90*time.Second, "a decision of 1 under light load", func() bool {
		l, _ := rec.last()
		return l.Known && l.Desired == 1 && l.Replicas == 1
	})
	load.Set(heavyLoad)
	want := podsFor(heavyLoad)
	testkit.Eventually(t, 60*time.Second, "the heavy load's scale, out of panic", func() bool {
		l, _ := rec.last()
		return !l.Decision.GetPanicking() && l.Desired == want && l.Ready == want
	})

	// Drop the load, and kill the decider in the middle of the scale-down.
	load.Set(lightLoad)
	killAt := system.NextTick(time.Now(), tick, 300*time.Millisecond).Add(tick)
	time.Sleep(time.Until(killAt))
	s.Decider.Kill()
	t.Logf("decider killed at t=%.1fs", time.Since(rec.start).Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Decider.Start(ctx, 30*time.Second); err != nil {
		t.Fatalf("restart decider: %v", err)
	}
	servingAt := time.Now()
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	resumed := testkit.Eventually(t, 3*tick, "the new decider's first decision", func() bool {
		d, err := obs.Decider().GetDecision(context.Background(), &deciderv1.GetDecisionRequest{Target: &commonv1.TargetRef{Namespace: k.Namespace, Name: k.Name}})
		return err == nil && d.GetDecision().GetDesiredReplicas() >= 0 && d.GetDecision().GetDecideTime().AsTime().After(servingAt)
	})
	if d := resumed.Sub(servingAt); d > tick+500*time.Millisecond {
		t.Errorf("decisions resumed %s after the new decider served; want within one tick (%s)", d, tick)
	}
	t.Logf("decisions resumed %s after the new decider served", resumed.Sub(servingAt).Round(time.Millisecond))

	// Ten ticks after the restart: every decision equals the reference's.
	time.Sleep(10 * tick)
	rec.stop()
	compared := 0
	for _, smp := range rec.since(servingAt) {
		if !smp.Known || smp.Desired < 0 || smp.Decision.GetDecideTime().AsTime().Before(servingAt) {
			continue
		}
		seq := smp.Decision.GetSequence()
		refDesired, refSeq, ok := ref.inEffect(seq)
		if !ok {
			t.Errorf("no reference decision at or before sequence %d", seq)
			continue
		}
		compared++
		t.Logf("tick %s: restarted decider %d, reference %d", smp.Decision.GetDecideTime().AsTime().UTC().Format("15:04:05.000"), smp.Desired, refDesired)
		if refDesired != smp.Desired {
			t.Errorf("after the restart, decision %d (sequence %d, %q) differs from the uninterrupted reference's %d (sequence %d)",
				smp.Desired, seq, smp.Decision.GetReason(), refDesired, refSeq)
		}
	}
	if compared < 8 {
		t.Errorf("compared %d decisions after the restart; want at least 8", compared)
	}
	rec.checkViolations()
	t.Logf("samples:\n%s", rec.table())
}

// paDecisions records the sequence of every decision the actuator records
// on a PodAutoscaler, from a watch.
func paDecisions(t *testing.T, s *system.System, ns, name string) func() []autoscalingv1alpha1.PodAutoscalerDecision {
	t.Helper()
	crds, err := s.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := crds.AutoscalingV1alpha1().PodAutoscalers(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []autoscalingv1alpha1.PodAutoscalerDecision
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pa, ok := ev.Object.(*autoscalingv1alpha1.PodAutoscaler)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if pa.Status.LastDecision == nil {
				continue
			}
			d := *pa.Status.LastDecision
			mu.Lock()
			if n := len(seen); n == 0 || seen[n-1].Sequence != d.Sequence {
				seen = append(seen, d)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() []autoscalingv1alpha1.PodAutoscalerDecision {
		mu.Lock()
		defer mu.Unlock()
		return append([]autoscalingv1alpha1.PodAutoscalerDecision(nil), seen...)
	}
}

// TestFaultActuatorRestart kills the actuator while decisions flow and the
// load changes: after a restart the latest decision is applied, and the
// decisions recorded on the PodAutoscaler never go back in sequence.
func TestFaultActuatorRestart(t *testing.T) {
	s := startSystem(t, system.Options{})
	load := system.NewDial(lightLoad)
	k, rec := startKPA(t, s, load)
	recorded := paDecisions(t, s, k.Namespace, k.Name)
	testkit.Eventually(t, 90*time.Second, "a decision of 1 under light load", func() bool {
		l, _ := rec.last()
		return l.Known && l.Desired == 1 && l.Replicas == 1
	})

	rec.paused.Store(true) // nothing is applied while the actuator is down
	s.Actuator.Kill()
	killedAt := time.Now()
	load.Set(heavyLoad)
	// Decisions change while the actuator is down.
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	testkit.Eventually(t, 4*tick, "a decision to scale up while the actuator is down", func() bool {
		d, err := obs.Decider().GetDecision(context.Background(), &deciderv1.GetDecisionRequest{Target: &commonv1.TargetRef{Namespace: k.Namespace, Name: k.Name}})
		return err == nil && d.GetDecision().GetDesiredReplicas() > 1
	})
	time.Sleep(2 * tick)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Actuator.Start(ctx, 30*time.Second); err != nil {
		t.Fatalf("restart actuator: %v", err)
	}
	t.Logf("actuator down for %s", time.Since(killedAt).Round(100*time.Millisecond))
	restartedAt := time.Now()
	applied := testkit.Eventually(t, 4*tick, "the latest decision applied after the restart", func() bool {
		smp, err := obs.Sample(context.Background(), k)
		return err == nil && smp.Known && smp.Desired > 1 && smp.Replicas == smp.Desired && smp.Applied > uint64(killedAt.UnixMilli())
	})
	t.Logf("latest decision applied %s after the actuator served again", applied.Sub(restartedAt).Round(time.Millisecond))
	time.Sleep(tick) // the sample in flight may predate the restart
	rec.paused.Store(false)
	want := podsFor(heavyLoad)
	testkit.Eventually(t, 60*time.Second, "the heavy load's scale", func() bool {
		l, _ := rec.last()
		return l.Desired == want && l.Replicas == want
	})
	time.Sleep(2 * tick)
	rec.stop()
	rec.checkViolations()
	seen := recorded()
	if len(seen) < 2 {
		t.Fatalf("%d decisions recorded on the PodAutoscaler; want several", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Sequence < seen[i-1].Sequence {
			t.Errorf("decision %d (sequence %d) recorded after %d (sequence %d): applied out of order",
				seen[i].DesiredScale, seen[i].Sequence, seen[i-1].DesiredScale, seen[i-1].Sequence)
		}
	}
	t.Logf("samples:\n%s", rec.table())
}
