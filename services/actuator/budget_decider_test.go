package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	decider "github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/decider/sender"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// The decider's defaults for its Scale calls (services/decider's
// --scale-workers, --scale-timeout, --scale-retry-min and -max); not its
// --scale-refresh, whose calls would come only after the test's end.
var deciderSend = sender.Config{Workers: 64, Timeout: 5 * time.Second, RetryMin: 100 * time.Millisecond, RetryMax: 5 * time.Second}

// TestWriteBudgetFromDecider is TestWriteBudget with the decider's side in
// front: the decisions go through the decider's sender, at its defaults, to
// the actuator whose --kube-qps is far below the rate of changes asked. With
// 960 scale-downs queued, every wake from zero still goes to the actuator
// ahead of them (the sender hands it the next free worker: no scale-down
// call starts between its decision and its call but those a worker had
// taken already) and waits there within a second for the budget, while
// the scale-downs wait; a newer decision replaces an older one still queued in
// the sender, which then never writes the older value. No call times out
// in the actuator's queue: one the budget cannot serve within half the
// sender's timeout is answered RESOURCE_EXHAUSTED (deferred) and sent
// again with the target's newest decision (64 calls timed out before).
func TestWriteBudgetFromDecider(t *testing.T) {
	sc := newBudgetScene(t)
	httpAddr := testkit.FreeAddr(t)
	client, _ := runActuator(t, sc.kubeconfig, testkit.FreeAddr(t), httpAddr, sc.namespaces,
		fmt.Sprintf("--kube-qps=%d", budgetQPS), fmt.Sprintf("--kube-burst=%d", budgetQPS))
	calls := &startedCalls{ActuatorServiceClient: client, first: map[budgetTarget]time.Time{}, errs: map[codes.Code]int{}}
	reg := prometheus.NewRegistry()
	snd := sender.New(deciderSend, calls, func(decider.Target) bool { return true }, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), reg)
	ctx, stop := context.WithCancel(context.Background())
	var sending sync.WaitGroup
	sending.Go(func() { _ = snd.Run(ctx) })
	t.Cleanup(func() { stop(); sending.Wait() })

	decision := func(tg budgetTarget, seq uint64, ready, desired int32) decider.Decision {
		return decider.Decision{Target: decider.Target{Namespace: tg.ns, Name: tg.name}, Strategy: decider.KPA,
			Sequence: seq, At: time.UnixMilli(int64(seq)), Desired: desired, Reason: "test",
			KPA: &kpa.Decision{ReadyPods: ready}}
	}
	// Every busy target is decided down to 2 at once, as a tick that saw
	// their load fall would.
	seq1 := uint64(time.Now().UnixMilli())
	downs := make([]decider.Decision, 0, len(sc.busy))
	for _, tg := range sc.busy {
		downs = append(downs, decision(tg, seq1, 3, 2))
	}
	snd.Enqueue(downs)
	testkit.Eventually(t, time.Minute, "the sender's workers' scale-downs waiting for the actuator's budget", func() bool {
		return int(actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_waiting{class="down"}`)) >= deciderSend.Workers/2
	})

	// The sleepers wake one by one, five a second.
	decided := make(map[budgetTarget]time.Time, len(sc.sleepers))
	pace := time.NewTicker(wakeEvery)
	for i, tg := range sc.sleepers {
		if i > 0 {
			<-pace.C
		}
		decided[tg] = time.Now()
		snd.Enqueue([]decider.Decision{decision(tg, uint64(time.Now().UnixMilli()), 0, 1)})
	}
	pace.Stop()
	testkit.Eventually(t, time.Minute, "every sleeper at 1", sc.allAt(sc.sleepers, 1))
	downsBefore := 0
	for _, tg := range sc.busy {
		if r, _ := sc.replicas(tg); slices.Contains(r, 2) {
			downsBefore++
		}
	}

	// The sender's part: the scale-down calls started between a wake's
	// decision and its Scale call, which only the workers that had taken
	// them before the decision may start. The actuator's: the wait for its
	// budget, by its own histogram (as in TestWriteBudget). How long each
	// took is logged, not judged: a loaded machine stretches it.
	sleeping := make(map[budgetTarget]bool, len(sc.sleepers))
	for _, tg := range sc.sleepers {
		sleeping[tg] = true
	}
	var toCall, toApplied []time.Duration
	overtaken := 0
	for _, tg := range sc.sleepers {
		began, ok := calls.firstOf(tg)
		if !ok {
			t.Errorf("%v: woken without a Scale call", tg)
			continue
		}
		toCall = append(toCall, began.Sub(decided[tg]))
		overtaken = max(overtaken, calls.between(decided[tg], began, func(tg budgetTarget) bool { return !sleeping[tg] }))
		if r, at := sc.replicas(tg); !slices.Equal(r, []int32{0, 1}) {
			t.Errorf("%v: spec.replicas went %v; want 0 → 1", tg, r)
		} else {
			toApplied = append(toApplied, at.Sub(decided[tg]))
		}
	}
	slices.Sort(toCall)
	slices.Sort(toApplied)
	// Calls already taken: at most one a worker, and only those between
	// taking a target and calling; a sender that did not put wakes first
	// would start hundreds of the 960 queued ahead of them.
	if overtaken > takenAhead {
		t.Errorf("%d scale-down calls started between a wake's decision and its Scale call; want at most %d", overtaken, takenAhead)
	}
	wakeWaits := actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_wait_seconds_count{class="wake"}`)
	withinSecond := actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_wait_seconds_bucket{class="wake",le="1.024"}`)
	if wakeWaits < float64(2*len(sc.sleepers)) || withinSecond != wakeWaits {
		t.Errorf("wakes' requests: %g, %g of them waited within 1.024s for the budget; want at least %d, all within",
			wakeWaits, withinSecond, 2*len(sc.sleepers))
	}
	if len(toCall) > 0 && len(toApplied) > 0 {
		t.Logf("%d wakes at %s each, %d scale-downs decided before them, --kube-qps %d, the decider's %d workers: decision → Scale call p50 %s, max %s; → spec.replicas seen p50 %s, max %s; at most %d scale-down calls started ahead of a wake; %d scale-downs applied meanwhile",
			len(toCall), wakeEvery, len(sc.busy), budgetQPS, deciderSend.Workers, toCall[len(toCall)/2].Round(time.Millisecond),
			toCall[len(toCall)-1].Round(time.Millisecond), toApplied[len(toApplied)/2].Round(time.Millisecond),
			toApplied[len(toApplied)-1].Round(time.Millisecond), overtaken, downsBefore)
	}
	if downsBefore > len(sc.busy)/2 {
		t.Errorf("%d of %d scale-downs applied before the last wake: they did not wait", downsBefore, len(sc.busy))
	}

	// A newer decision for every busy target: down to 1. Where the older
	// one still waits in the sender it is replaced, and 2 is never written.
	seq2 := uint64(time.Now().UnixMilli())
	downs = downs[:0]
	for _, tg := range sc.busy {
		downs = append(downs, decision(tg, seq2, 3, 1))
	}
	snd.Enqueue(downs)
	testkit.Eventually(t, 5*time.Minute, "every busy target at 1", sc.allAt(sc.busy, 1))
	straight := 0
	for _, tg := range sc.busy {
		switch r, _ := sc.replicas(tg); {
		case slices.Equal(r, []int32{3, 1}):
			straight++
		case !slices.Equal(r, []int32{3, 2, 1}):
			t.Errorf("%v: spec.replicas went %v; want 3 → 1 or 3 → 2 → 1", tg, r)
		}
	}
	// A target goes straight to 1 when the sender replaced its older
	// decision, or when the actuator deferred the call that carried it
	// before writing anything: nothing else skips a value.
	superseded := registered(t, reg, "tidal_decider_scale_superseded_total")
	deferred, failed := calls.failed()
	var budgetDeferred float64
	for _, class := range []string{"wake", "up", "down"} {
		budgetDeferred += actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_deferred_total{class="`+class+`"}`)
	}
	t.Logf("then a newer decision (down to 1) for each: %d went straight from 3 to 1 (%g decisions replaced in the sender); Scale calls deferred by the actuator's budget and sent again: %d (its count: %g); failed: %v",
		straight, superseded, deferred, budgetDeferred, failed)
	if straight < len(sc.busy)/2 || float64(straight) > superseded+float64(deferred) {
		t.Errorf("%d of %d targets went straight to 1, with %g decisions replaced and %d calls deferred; want at least half, each a replaced decision or a deferred call",
			straight, len(sc.busy), superseded, deferred)
	}
	// A call the budget cannot serve in time is deferred, not timed out
	// there: no request that would start a pass expires in the queue. One
	// may still time out in a write the API server answers late, on a
	// machine busy enough (18 of about 2,000 in a make test beside two
	// peer suites); it is retried like any failed call. Its pass's later
	// request (the scale patch after its status write) waits without the
	// deferral's limit, so that is where such a deadline may pass, and
	// then the call is one of those that failed.
	var expiredFirst, expiredLater float64
	for _, class := range []string{"wake", "up", "down"} {
		expiredFirst += actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_expired_total{class="`+class+`",request="first"}`)
		expiredLater += actuatorMetric(t, httpAddr, `tidal_actuator_write_budget_expired_total{class="`+class+`",request="later"}`)
	}
	t.Logf("requests whose deadline passed in the actuator's budget: %g of started passes, %g that would start one", expiredLater, expiredFirst)
	if expiredFirst > 0 {
		t.Errorf("%g requests that would start a pass saw their deadline pass while they waited for the actuator's budget; want none (deferred)", expiredFirst)
	}
	if expiredLater > float64(failed[codes.DeadlineExceeded]) {
		t.Errorf("%g started passes' requests saw their deadline pass in the actuator's budget, more than the %d calls that failed with DeadlineExceeded", expiredLater, failed[codes.DeadlineExceeded])
	}
	for code, n := range failed {
		if code != codes.DeadlineExceeded {
			t.Errorf("%d Scale calls failed with %s; want none", n, code)
		}
	}
	if float64(deferred) != budgetDeferred {
		t.Errorf("the sender saw %d calls deferred, the actuator's budget deferred %g", deferred, budgetDeferred)
	}
}

// takenAhead bounds the scale-down calls that start after a wake's
// decision though a worker took them before it.
const takenAhead = 8

// startedCalls is the actuator's client as the sender uses it, noting when
// each Scale call started and how calls ended in errors.
type startedCalls struct {
	actuatorv1.ActuatorServiceClient
	mu sync.Mutex
	// first is when each target's first call started; starts every
	// call's target and start, in order.
	first  map[budgetTarget]time.Time
	starts []startedCall
	// deferred counts the calls answered RESOURCE_EXHAUSTED, errs the
	// others that failed, by code.
	deferred int
	errs     map[codes.Code]int
}

func (c *startedCalls) Scale(ctx context.Context, req *actuatorv1.ScaleRequest, opts ...grpc.CallOption) (*actuatorv1.ScaleResponse, error) {
	tg := budgetTarget{req.GetTarget().GetNamespace(), req.GetTarget().GetName()}
	c.mu.Lock()
	now := time.Now()
	if _, ok := c.first[tg]; !ok {
		c.first[tg] = now
	}
	c.starts = append(c.starts, startedCall{tg, now})
	c.mu.Unlock()
	resp, err := c.ActuatorServiceClient.Scale(ctx, req, opts...)
	if err != nil {
		c.mu.Lock()
		if code := status.Code(err); code == codes.ResourceExhausted {
			c.deferred++
		} else {
			c.errs[code]++
		}
		c.mu.Unlock()
	}
	return resp, err
}

type startedCall struct {
	tg budgetTarget
	at time.Time
}

func (c *startedCalls) firstOf(tg budgetTarget) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.first[tg]
	return at, ok
}

// between counts the calls that started after from and before to, for
// targets which.
func (c *startedCalls) between(from, to time.Time, which func(budgetTarget) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.starts {
		if s.at.After(from) && s.at.Before(to) && which(s.tg) {
			n++
		}
	}
	return n
}

// failed is the calls deferred, and the failed ones by code.
func (c *startedCalls) failed() (deferred int, failed map[codes.Code]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deferred, maps.Clone(c.errs)
}

// registered returns the value of the counter name in reg.
func registered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("registry lacks the counter %s", name)
	return 0
}
