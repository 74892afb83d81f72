package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// tick is the decider's KPA tick; samples are taken sampleOffset after
// each, when that tick's decision has been applied.
const (
	tick         = 2 * time.Second
	sampleOffset = 1200 * time.Millisecond
	// recheck is how long after an inconsistent sample it is taken again
	// before the mismatch counts: the actuator's write and the Deployment
	// read race by a few milliseconds at most.
	recheck = 400 * time.Millisecond
)

// recorder samples one target every tick in the background, keeps the
// samples in a Ledger and checks at every tick that the Deployment has the
// replicas the decider's Explain asks for after the reconciler's rules.
type recorder struct {
	t      *testing.T
	obs    *system.Observer
	target system.Target
	start  time.Time
	// rule says whether a sample's replicas follow from its decision;
	// prev is the replicas of the previous sample.
	rule   func(s system.Sample, prev int32) error
	cancel context.CancelFunc
	done   chan struct{}
	// paused suspends the rule while a test holds a fault that stops
	// decisions from being applied (the actuator down).
	paused atomic.Bool

	// mu guards ledger and violations.
	mu         sync.Mutex
	ledger     system.Ledger
	violations []string
}

func record(t *testing.T, s *system.System, target system.Target, rule func(system.Sample, int32) error) *recorder {
	t.Helper()
	obs, err := s.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{t: t, obs: obs, target: target, start: time.Now(), rule: rule, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		obs.Follow(ctx, []system.Target{target}, tick, sampleOffset, func(_ int, smp system.Sample) { r.add(ctx, smp) },
			func(err error) { t.Logf("sample: %v", err) })
	}()
	t.Cleanup(func() {
		r.stop()
		obs.Close()
		if t.Failed() {
			testkit.KeepLog(t, "samples", r.table())
		}
	})
	return r
}

func (r *recorder) add(ctx context.Context, s system.Sample) {
	r.mu.Lock()
	prev := int32(-1)
	if n := len(r.ledger.Samples); n > 0 {
		prev = r.ledger.Samples[n-1].Replicas
	}
	r.mu.Unlock()
	if r.rule != nil && !r.paused.Load() {
		if err := r.rule(s, prev); err != nil {
			// Look again once: a decision made between the Explain and the
			// Deployment read is not a mismatch.
			time.Sleep(recheck)
			again, aerr := r.obs.Sample(ctx, r.target)
			if aerr == nil {
				if err2 := r.rule(again, prev); err2 != nil && again.Decision.GetSequence() == s.Decision.GetSequence() {
					r.mu.Lock()
					r.violations = append(r.violations, fmt.Sprintf("t=%.1fs: %v (again %s later: %v)", s.Time.Sub(r.start).Seconds(), err, recheck, err2))
					r.mu.Unlock()
				}
				s = again
			}
		}
	}
	r.mu.Lock()
	r.ledger.Add(s)
	r.mu.Unlock()
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

// last returns the latest sample, if any.
func (r *recorder) last() (system.Sample, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ledger.Samples) == 0 {
		return system.Sample{}, false
	}
	return r.ledger.Samples[len(r.ledger.Samples)-1], true
}

// since returns the samples taken at or after t.
func (r *recorder) since(t time.Time) []system.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []system.Sample
	for _, s := range r.ledger.Samples {
		if !s.Time.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// waitSample waits until a sample taken after t exists and returns the
// first such.
func (r *recorder) waitSample(after time.Time, timeout time.Duration) system.Sample {
	r.t.Helper()
	var got system.Sample
	testkit.Eventually(r.t, timeout, fmt.Sprintf("a sample after t=%.1fs", after.Sub(r.start).Seconds()), func() bool {
		ss := r.since(after)
		if len(ss) == 0 {
			return false
		}
		got = ss[0]
		return true
	})
	return got
}

func (r *recorder) checkViolations() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		r.t.Errorf("replicas do not follow the decision: %s", v)
	}
}

func (r *recorder) ledgerCopy() system.Ledger {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.ledger
	l.Samples = append([]system.Sample(nil), r.ledger.Samples...)
	return l
}

func (r *recorder) table() string {
	var b strings.Builder
	b.WriteString(system.TableHeader + "\n")
	_, name := r.target.Ref()
	for _, s := range r.ledgerCopy().Samples {
		system.WriteRow(&b, r.start, name, s)
	}
	return b.String()
}

// kpaRule is the KPA reconciler's rule (knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/kpa/scaler.go) for
// a PodAutoscaler without min or max scale: a positive desired scale is
// applied as it is; a desired 0 leaves the target at 1 (active for less than
// a window), at its current scale (waiting for the grace period) or at 0.
func kpaRule(s system.Sample, prev int32) error {
	if !s.Known || s.Desired < 0 || s.Replicas < 0 {
		return nil
	}
	if s.Desired > 0 {
		if s.Replicas != s.Desired {
			return fmt.Errorf("decision %d (sequence %d, %q) but the Deployment has %d replicas", s.Desired, s.Decision.GetSequence(), s.Decision.GetReason(), s.Replicas)
		}
		return nil
	}
	if s.Replicas != 0 && s.Replicas != 1 && s.Replicas != prev {
		return fmt.Errorf("decision 0 (sequence %d) but the Deployment went from %d to %d replicas", s.Decision.GetSequence(), prev, s.Replicas)
	}
	return nil
}
