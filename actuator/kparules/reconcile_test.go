package kparules

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

func revision(t *testing.T, cfg, ann map[string]string) kpaconfig.Revision {
	t.Helper()
	c, err := kpaconfig.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kpaconfig.NewRevision(c, kpaconfig.DefaultDeployment(), ann, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func i32(v int32) *int32 { return &v }

func TestApplyBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ lo, hi, x, want int32 }{
		{0, 0, 5, 5}, {2, 0, 1, 2}, {0, 3, 5, 3}, {2, 3, -1, 2}, {0, 0, -1, 0}, {3, 3, 3, 3},
	} {
		if got := ApplyBounds(c.lo, c.hi, c.x); got != c.want {
			t.Errorf("ApplyBounds(%d, %d, %d) = %d, want %d", c.lo, c.hi, c.x, got, c.want)
		}
	}
}

func TestNumActivators(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ready              int32
		tbc, total, actCap float64
		want               int32
	}{
		{4, 211, 100, 100, 7}, {30, 0, 100, 100, 2}, {30, -1, 10, 100, 3}, {0, 211, 100, 100, 3}, {0, -1, 10, 100, 2},
	} {
		if got := NumActivators(c.ready, c.tbc, c.total, c.actCap); got != c.want {
			t.Errorf("NumActivators(%+v) = %d, want %d", c, got, c.want)
		}
	}
}

func TestSKSModeFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		want, ebc int32
		mode      SKSMode
	}{{4, 0, SKSServe}, {4, -1, SKSProxy}, {0, 10, SKSProxy}, {-1, 50, SKSProxy}} {
		if got := SKSModeFor(c.want, c.ebc); got != c.mode {
			t.Errorf("SKSModeFor(%d, %d) = %s, want %s", c.want, c.ebc, got, c.mode)
		}
	}
}

// TestScaleToZeroTimeline walks one revision from Active with desired 0 to
// zero replicas under the default 30 s grace period.
func TestScaleToZeroTimeline(t *testing.T) {
	t.Parallel()
	rev := revision(t, nil, map[string]string{kpaconfig.AnnotationTargetBurstCapacity: "0"})
	base := Input{
		Revision:               rev,
		Reachability:           Reachable,
		ScaleTargetInitialized: true,
		ServiceNameSet:         true,
		SKS:                    &SKS{Mode: SKSServe, PrivateServiceNameSet: true},
		Replicas:               i32(1),
		ReadyPods:              1,
		Decider:                kpaspec.Status{DesiredScale: 0},
	}
	probe := func() bool { return true }

	// Active for 10 s: hold one pod and come back when the window is over.
	in := base
	in.Active, in.ActiveAge = Condition{Status: ConditionTrue}, 10*time.Second
	r := Reconcile(in, probe)
	if r.Patch != nil || r.Want != 1 || fmt.Sprint(r.Requeue) != "[50s]" || r.Active.Status != ConditionTrue {
		t.Fatalf("active 10s: %+v", r)
	}
	// Active for a whole stable window: mark Inactive, do not patch.
	in.ActiveAge = time.Minute
	r = Reconcile(in, probe)
	if r.Patch != nil || r.Active.Reason != ReasonNoTraffic || !r.ActiveChanged || r.SKSMode != SKSProxy {
		t.Fatalf("active 60s: %+v", r)
	}
	// Inactive 5 s, proxying 4 s: wait the rest of the grace period.
	in = base
	in.SKS = &SKS{Mode: SKSProxy, PrivateServiceNameSet: true, ProxyFor: 4 * time.Second}
	in.Active, in.ActiveAge = Condition{Status: ConditionFalse, Reason: ReasonNoTraffic}, 5*time.Second
	r = Reconcile(in, probe)
	if r.Patch != nil || fmt.Sprint(r.Requeue) != "[26s]" || r.SyncProbes != 1 {
		t.Fatalf("inactive 5s: %+v", r)
	}
	// The probe fails: start the async probe, do nothing else.
	r = Reconcile(in, func() bool { return false })
	if r.Patch != nil || !r.AsyncProbe || len(r.Requeue) != 0 {
		t.Fatalf("probe fails: %+v", r)
	}
	// Proxying for the grace period: scale to zero.
	in.SKS.ProxyFor = 30 * time.Second
	r = Reconcile(in, probe)
	if r.Patch == nil || *r.Patch != 0 || r.Active.Status != ConditionFalse || r.ActiveChanged {
		t.Fatalf("grace over: %+v", r)
	}
}

// TestPredictedIdle walks the same revision to zero when the decider's 0
// is the keep-alive policy's prediction: no stable window, grace or
// retention, but the activator still in the path first.
func TestPredictedIdle(t *testing.T) {
	t.Parallel()
	probe := func() bool { return true }
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		cfg       map[string]string
		active    Condition
		age       time.Duration
		probe     Prober
		want      int32
		patch     *int32
		inactive  bool // the status turns Inactive
		asyncProb bool
	}{
		{name: "active 10 s: Inactive at once", active: Condition{Status: ConditionTrue}, age: 10 * time.Second, probe: probe, want: 0, inactive: true},
		{name: "inactive: zero without grace", active: Condition{Status: ConditionFalse, Reason: ReasonNoTraffic}, age: time.Second, probe: probe, want: 0, patch: i32(0)},
		{name: "inactive, retention set: zero without it", ann: map[string]string{kpaconfig.AnnotationScaleToZeroPodRetentionPeriod: "10m"},
			active: Condition{Status: ConditionFalse, Reason: ReasonNoTraffic}, age: time.Second, probe: probe, want: 0, patch: i32(0)},
		{name: "inactive, activator not in the path yet", active: Condition{Status: ConditionFalse, Reason: ReasonNoTraffic}, age: time.Second,
			probe: func() bool { return false }, want: 0, asyncProb: true},
		{name: "min-scale keeps precedence", ann: map[string]string{kpaconfig.AnnotationMinScale: "1"}, active: Condition{Status: ConditionTrue}, age: 10 * time.Second, probe: probe, want: 1},
		{name: "scale to zero disabled", cfg: map[string]string{kpaconfig.KeyEnableScaleToZero: "false"}, active: Condition{Status: ConditionTrue}, age: 10 * time.Second, probe: probe, want: 1},
		{name: "initial scale before initialised", ann: map[string]string{kpaconfig.AnnotationInitialScale: "3"}, active: Condition{Status: ConditionTrue}, age: 10 * time.Second, probe: probe, want: 3, patch: i32(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{kpaconfig.AnnotationTargetBurstCapacity: "0"}
			for k, v := range tc.ann {
				ann[k] = v
			}
			in := Input{
				Revision:               revision(t, tc.cfg, ann),
				Reachability:           Reachable,
				Active:                 tc.active,
				ActiveAge:              tc.age,
				ScaleTargetInitialized: tc.ann[kpaconfig.AnnotationInitialScale] == "",
				ServiceNameSet:         true,
				SKS:                    &SKS{Mode: SKSProxy, PrivateServiceNameSet: true},
				Replicas:               i32(1),
				ReadyPods:              1,
				Decider:                kpaspec.Status{DesiredScale: 0, PredictedIdle: true},
			}
			r := Reconcile(in, tc.probe)
			if r.Want != tc.want || (r.Patch == nil) != (tc.patch == nil) || (r.Patch != nil && *r.Patch != *tc.patch) {
				t.Errorf("want %d patch %v, got want %d patch %v (%+v)", tc.want, tc.patch, r.Want, r.Patch, r)
			}
			if got := r.Active.Status == ConditionFalse && in.Active.Status == ConditionTrue; got != tc.inactive {
				t.Errorf("turned inactive: %v, want %v", got, tc.inactive)
			}
			if r.AsyncProbe != tc.asyncProb {
				t.Errorf("async probe %v, want %v", r.AsyncProbe, tc.asyncProb)
			}
			// Without the prediction the same input keeps Knative's waits.
			in.Decider.PredictedIdle = false
			if fixed := Reconcile(in, tc.probe); tc.patch != nil && *tc.patch == 0 && fixed.Patch != nil {
				t.Errorf("without the prediction the pod went at once too: %+v", fixed)
			}
		})
	}
}

func TestActivationTimeout(t *testing.T) {
	t.Parallel()
	rev := revision(t, nil, map[string]string{kpaconfig.AnnotationProgressDeadline: "20s"})
	in := Input{
		Revision:     rev,
		Reachability: Reachable,
		Active:       Condition{Status: ConditionUnknown, Reason: ReasonQueued},
		SKS:          &SKS{Mode: SKSProxy, PrivateServiceNameSet: true},
		Replicas:     i32(1),
		Decider:      kpaspec.Status{DesiredScale: 0, ExcessBurstCapacity: -211},
	}
	in.ActiveAge = 50 * time.Second // not strictly longer than 20 s + 30 s
	r := Reconcile(in, nil)
	if r.Patch != nil || r.Want != -1 || fmt.Sprint(r.Requeue) != "[50s]" {
		t.Fatalf("at the timeout: %+v", r)
	}
	in.ActiveAge = 50*time.Second + time.Millisecond
	r = Reconcile(in, nil)
	if r.Patch == nil || *r.Patch != 0 || r.Active.Reason != ReasonTimedOut {
		t.Fatalf("past the timeout: %+v", r)
	}
}

func TestStatusKeepsDesiredOverRestart(t *testing.T) {
	t.Parallel()
	in := Input{
		Revision:               revision(t, nil, nil),
		Reachability:           Reachable,
		Active:                 Condition{Status: ConditionTrue},
		ActiveAge:              time.Hour,
		ScaleTargetInitialized: true,
		PriorDesiredScale:      i32(4),
		SKS:                    &SKS{Mode: SKSServe, PrivateServiceNameSet: true},
		Replicas:               i32(4),
		ReadyPods:              4,
		Decider:                kpaspec.Status{DesiredScale: -1, ExcessBurstCapacity: 50},
	}
	r := Reconcile(in, nil)
	if r.DesiredScale != 4 || r.Patch != nil || r.SKSMode != SKSProxy || r.NumActivators != 7 {
		t.Errorf("restart: %+v", r)
	}
	in.SKS = nil
	r = Reconcile(in, nil)
	if r.SKSMode != SKSProxy || r.NumActivators != MinActivators || r.ActualScale != 0 || r.Metric != nil {
		t.Errorf("no SKS: %+v", r)
	}
}

func TestReconcileLag(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	active := Condition{Status: ConditionTrue}
	tests := []struct {
		name        string
		ann         map[string]string
		desired     int32
		replicas    int32
		ready       int32
		prior       *int32
		wantPatch   *int32
		wantDesired int32
		wantActive  ConditionStatus
	}{
		{"scale up", nil, 4, 1, 1, nil, i32(4), 4, ConditionTrue},
		{"to zero", nil, 0, 2, 2, nil, i32(0), 0, ConditionFalse},
		{"from zero, no pods yet", nil, 2, 0, 0, nil, i32(2), 2, ConditionUnknown},
		{"unchanged", nil, 3, 3, 3, nil, nil, 3, ConditionTrue},
		{"unknown keeps prior", nil, -1, 3, 3, i32(3), nil, 3, ConditionTrue},
		{"max-scale", map[string]string{kpaconfig.AnnotationMaxScale: "5"}, 9, 1, 1, nil, i32(5), 5, ConditionTrue},
		{"min-scale", map[string]string{kpaconfig.AnnotationMinScale: "1"}, 0, 2, 2, nil, i32(1), 1, ConditionTrue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ReconcileLag(Input{
				Revision: revision(t, nil, tt.ann), Active: active, Replicas: &tt.replicas, ReadyPods: tt.ready,
				PriorDesiredScale: tt.prior, Decider: kpaspec.Status{DesiredScale: tt.desired},
			})
			if (r.Patch == nil) != (tt.wantPatch == nil) || (r.Patch != nil && *r.Patch != *tt.wantPatch) {
				t.Errorf("Patch = %v, want %v", r.Patch, tt.wantPatch)
			}
			if r.DesiredScale != tt.wantDesired {
				t.Errorf("DesiredScale = %d, want %d", r.DesiredScale, tt.wantDesired)
			}
			if r.Active.Status != tt.wantActive {
				t.Errorf("Active = %v, want %v", r.Active.Status, tt.wantActive)
			}
		})
	}
}
