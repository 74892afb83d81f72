package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

const (
	lagPartitions = 4
	lagIdle       = 5 * time.Second
	lagPerPod     = 40.0 // records per second one pod processes
)

// lagRule: the lag strategy's decision is applied as it is (the decider
// already capped it and ran the idle timeout).
func lagRule(s system.Sample, _ int32) error {
	if !s.Known || s.Desired < 0 || s.Replicas < 0 {
		return nil
	}
	if s.Replicas != s.Desired {
		return fmt.Errorf("decision %d (sequence %d, %q) but the Deployment has %d replicas", s.Desired, s.Decision.GetSequence(), s.Decision.GetReason(), s.Replicas)
	}
	return nil
}

// replicaWatch records every spec.replicas a Deployment ever has, from a
// watch, so a value between two samples is not missed.
type replicaWatch struct {
	mu     sync.Mutex
	values []int32
	max    int32
	cancel context.CancelFunc
	done   chan struct{}
}

func watchReplicas(t *testing.T, s *system.System, ns, name string) *replicaWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.Cluster.Client.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rw := &replicaWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted || d.Spec.Replicas == nil {
				continue
			}
			rw.mu.Lock()
			if n := len(rw.values); n == 0 || rw.values[n-1] != *d.Spec.Replicas {
				rw.values = append(rw.values, *d.Spec.Replicas)
			}
			rw.max = max(rw.max, *d.Spec.Replicas)
			rw.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-rw.done })
	return rw
}

func (rw *replicaWatch) snapshot() ([]int32, int32) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]int32(nil), rw.values...), rw.max
}

// TestLag scales a Function on its input topic's consumer lag: a backlog
// scales it up, never above the partition count; consumers (one per ready
// pod) drain it and commit; it returns to zero after the idle timeout; new
// records bring it back.
func TestLag(t *testing.T) {
	s := startSystem(t, system.Options{Kafka: true})
	ns := s.Cluster.Namespace(t)
	produce := system.NewDial(0)
	idle := lagIdle
	f, err := s.StartFunction(context.Background(), system.FunctionOptions{
		Namespace: ns, Name: "fn", Topic: "in", Partitions: lagPartitions, IdleTimeout: &idle,
		Produce: produce, RatePerPod: lagPerPod, ColdStart: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	testkit.Eventually(t, 30*time.Second, "the Function's Deployment", func() bool {
		_, err := s.Cluster.Client.AppsV1().Deployments(ns).Get(context.Background(), "fn", metav1.GetOptions{})
		return err == nil
	})
	rw := watchReplicas(t, s, ns, "fn")
	rec := record(t, s, f, lagRule)
	testkit.Eventually(t, 60*time.Second, "the decider to hold the Function at 0", func() bool {
		l, ok := rec.last()
		return ok && l.Known && l.Desired == 0 && l.Replicas == 0
	})

	// A backlog far beyond what four pods clear in a few seconds.
	produce.Set(400)
	time.Sleep(3 * time.Second)
	produce.Set(0)
	testkit.Eventually(t, 10*time.Second, "the backlog acknowledged", func() bool { return f.Producer.Produced() >= 1000 })
	backlog := f.Producer.Produced()
	testkit.Eventually(t, 30*time.Second, "a scale-up to the partition count", func() bool {
		l, _ := rec.last()
		return l.Replicas == lagPartitions && l.Ready == lagPartitions
	})
	// The group's lag, read from the broker, not through tidal.
	drained := testkit.Eventually(t, 90*time.Second, "the consumers to drain the backlog and commit", func() bool {
		lag, err := s.GroupLag(context.Background(), "fn")
		return err == nil && lag == 0 && f.Consumers.Processed() >= backlog
	})
	zeroAt := testkit.Eventually(t, lagIdle+30*time.Second, "the Function back at 0 after the idle timeout", func() bool {
		l, _ := rec.last()
		return l.Replicas == 0
	})
	t.Logf("scaled to zero %s after the group's lag reached 0 (idle timeout %s)", zeroAt.Sub(drained).Round(100*time.Millisecond), lagIdle)
	if d := zeroAt.Sub(drained); d < lagIdle-tick {
		t.Errorf("scaled to zero %s after the lag reached 0; want the %s idle timeout first", d, lagIdle)
	}

	// New records bring it back from zero.
	produce.Set(20)
	backAt := time.Now()
	upAt := testkit.Eventually(t, 20*time.Second, "a scale-up from zero on new records", func() bool {
		l, _ := rec.last()
		return l.Replicas >= 1
	})
	t.Logf("back from zero %s after records arrived", upAt.Sub(backAt).Round(100*time.Millisecond))
	produce.Set(0)
	testkit.Eventually(t, 60*time.Second, "the new records consumed", func() bool {
		return f.Consumers.Processed() >= f.Producer.Produced()
	})
	rec.stop()
	rec.checkViolations()
	if err := f.Consumers.Err(); err != nil {
		t.Errorf("consumers: %v", err)
	}
	values, most := rw.snapshot()
	if most > lagPartitions {
		t.Errorf("replicas went to %d; never above the %d partitions (history %v)", most, lagPartitions, values)
	}
	l := rec.ledgerCopy()
	t.Logf("records: %d produced, %d processed; cold starts %d; cost %.0f pod-seconds; replicas history %v",
		f.Producer.Produced(), f.Consumers.Processed(), l.ColdStarts, l.PodSeconds, values)
	t.Logf("samples:\n%s", rec.table())
	errs := map[string]int{}
	for _, s := range l.Samples {
		if e := s.Lag.GetMeasureError(); e != "" {
			errs[e]++
		}
	}
	for e, n := range errs {
		t.Logf("lag not measured at %d of %d ticks: %s", n, len(l.Samples), e)
	}
}
