package kparules

import (
	"math"
	"time"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
	"github.com/tidalscale/tidal/strategy/kpaspec"
)

// ConditionStatus is a Kubernetes condition status.
type ConditionStatus string

const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Reasons and messages of the Active condition (Knative's pa_lifecycle.go
// and kpa.go).
const (
	ReasonQueued    = "Queued"
	ReasonNoTraffic = "NoTraffic"
	ReasonTimedOut  = "TimedOut"

	MessageQueued    = "Requests to the target are being buffered as resources are provisioned."
	MessageNoTraffic = "The target is not receiving traffic."
	MessageTimedOut  = "The target could not be activated."
)

// Condition is a PodAutoscaler condition's state.
type Condition struct {
	Status  ConditionStatus
	Reason  string
	Message string
}

// Reachability says whether a route reaches the revision.
type Reachability string

const (
	Reachable   Reachability = "Reachable"
	Unreachable Reachability = "Unreachable"
	// ReachabilityUnknown counts as reachable.
	ReachabilityUnknown Reachability = ""
)

// ReachabilityOf reads a PodAutoscaler's spec.reachability, of either
// kind: anything but the two known values is unknown.
func ReachabilityOf(s string) Reachability {
	if r := Reachability(s); r == Reachable || r == Unreachable {
		return r
	}
	return ReachabilityUnknown
}

// SKSMode is the ServerlessService's mode.
type SKSMode string

const (
	// SKSServe routes traffic to the pods directly.
	SKSServe SKSMode = "Serve"
	// SKSProxy routes traffic through the activator.
	SKSProxy SKSMode = "Proxy"
)

// MinActivators is the smallest activator subset (Knative's minActivators).
const MinActivators = 2

// ActiveProxyRequeue is the extra requeue when a PA goes inactive while the
// SKS is already in Proxy mode, so that it is reconciled again although the
// SKS will not change.
const ActiveProxyRequeue = 3 * time.Second

// SKS is the observed ServerlessService.
type SKS struct {
	// Mode is the SKS spec's mode.
	Mode SKSMode
	// PrivateServiceNameSet reports whether its status names the private
	// service; without it the SKS counts as not there yet.
	PrivateServiceNameSet bool
	// ProxyFor is how long ActivatorEndpointsPopulated has been True; 0 when
	// it is not True.
	ProxyFor time.Duration
}

// Input is one reconcile's observed state.
type Input struct {
	// Revision holds the config and annotations.
	Revision kpaconfig.Revision
	// Reachability of the PA.
	Reachability Reachability

	// Active is the PA's Active condition and ActiveAge the time since it
	// last changed.
	Active    Condition
	ActiveAge time.Duration
	// ScaleTargetInitialized is the PA's condition.
	ScaleTargetInitialized bool
	// ServiceNameSet reports whether PA status.serviceName is set.
	ServiceNameSet bool
	// PriorDesiredScale is PA status.desiredScale, nil when unset.
	PriorDesiredScale *int32

	// SKS is nil when it does not exist yet.
	SKS *SKS
	// Replicas is the scale target's spec.replicas; nil reads as 1.
	Replicas *int32
	// ReadyPods are the revision's ready pods.
	ReadyPods int32

	// Decider is the decider's status for the revision.
	Decider kpaspec.Status
}

// Prober probes whether the activator is in the revision's path; it is
// called only when the scale-to-zero decision needs it.
type Prober func() bool

// MetricSpec is the Metric the reconciler writes.
type MetricSpec struct {
	// Scraped is false when the scrape target is empty (TBC -1).
	Scraped      bool
	StableWindow time.Duration
	PanicWindow  time.Duration
}

// Result is what one reconcile decided.
type Result struct {
	// Want is the scale the reconciler settled on; -1 means unknown.
	Want int32
	// Patch is the replicas to write to the scale target, nil for none.
	Patch *int32
	// Requeue lists every re-enqueue delay requested, in order.
	Requeue []time.Duration
	// SyncProbes counts activator probes made; AsyncProbe asks the caller to
	// start a background probe (every 1 s, up to 45 s) and requeue when done.
	SyncProbes int
	AsyncProbe bool

	// PA status after the reconcile.
	DesiredScale           int32
	ActualScale            int32
	Active                 Condition
	ActiveChanged          bool
	ScaleTargetInitialized bool

	// SKS spec after the reconcile.
	SKSMode       SKSMode
	NumActivators int32
	// Metric is nil when the reconcile stopped before reconciling it.
	Metric *MetricSpec
}

// Reconcile runs one KPA reconcile over in (spec §6.2): bounds and initial
// scale, scale to zero, SKS mode and activators, then the PA status. probe is
// called at most once.
func Reconcile(in Input, probe Prober) Result {
	rev := &in.Revision
	rev.Reachable = in.Reachability != Unreachable
	r := Result{}

	if in.SKS == nil || !in.SKS.PrivateServiceNameSet {
		// Create the SKS in Proxy mode with the default activator count and
		// report an unknown scale on no pods.
		r.SKSMode, r.NumActivators = SKSProxy, MinActivators
		computeStatus(&r, &in, kpaspec.ScaleUnknown, 0, in.ServiceNameSet)
		return r
	}

	spec := rev.DeciderSpec()
	r.Metric = &MetricSpec{Scraped: rev.Scraped(), StableWindow: rev.StableWindow(), PanicWindow: rev.PanicWindow()}

	want, patch := scale(&r, &in, in.Decider.DesiredScale, probe)
	r.Want, r.Patch = want, patch
	r.SKSMode = SKSModeFor(want, in.Decider.ExcessBurstCapacity)
	r.NumActivators = NumActivators(in.ReadyPods, spec.TargetBurstCapacity, spec.TotalValue, spec.ActivatorCapacity)
	// The SKS reconcile copies status.serviceName from the SKS.
	computeStatus(&r, &in, want, in.ReadyPods, true)
	return r
}

// scale is Knative's scaler.scale (spec §6.3): it returns the want and the
// replicas to patch, if any.
func scale(r *Result, in *Input, desired int32, probe Prober) (int32, *int32) {
	rev := &in.Revision
	if desired < 0 && in.Active.Status != ConditionUnknown {
		return desired, nil
	}
	lo, hi := rev.ScaleBounds()
	if initial := rev.InitialScale(); initial > 1 && !in.ScaleTargetInitialized && rev.Reachable {
		lo = max(lo, initial)
	}
	desired = ApplyBounds(lo, hi, desired)

	desired, apply := scaleToZero(r, in, desired, probe)
	if !apply {
		return desired, nil
	}
	current := int32(1)
	if in.Replicas != nil {
		current = *in.Replicas
	}
	if desired == current {
		return desired, nil
	}
	p := desired
	return desired, &p
}

// ApplyBounds clamps x to [lo, hi]; hi 0 means unbounded. A -1 below lo
// becomes lo.
func ApplyBounds(lo, hi, x int32) int32 {
	if x < lo {
		return lo
	}
	if hi != 0 && x > hi {
		return hi
	}
	return x
}

// scaleToZero is Knative's handleScaleToZero (spec §6.4).
func scaleToZero(r *Result, in *Input, desired int32, probe Prober) (int32, bool) {
	if desired != 0 {
		return desired, true
	}
	rev := &in.Revision
	cfg := &rev.Config
	if !cfg.EnableScaleToZero {
		return 1, true
	}
	switch in.Active.Status {
	case ConditionUnknown:
		timeout := rev.ActivationTimeout()
		if in.ActiveAge > timeout {
			return desired, true
		}
		r.Requeue = append(r.Requeue, timeout)
		return kpaspec.ScaleUnknown, false
	case ConditionTrue:
		sw := rev.StableWindow()
		// A predicted idle needs no stable window of activity first: the
		// PodAutoscaler goes Inactive (the activator into the path) now.
		if in.ActiveAge >= sw || in.Decider.PredictedIdle {
			if in.SKS.Mode == SKSProxy {
				r.Requeue = append(r.Requeue, ActiveProxyRequeue)
			}
			// Not applied: the status turns Inactive instead.
			return desired, false
		}
		r.Requeue = append(r.Requeue, sw-in.ActiveAge)
		return 1, true
	default:
		inPath := true
		if rev.TargetBurstCapacity() != -1 {
			r.SyncProbes++
			inPath = probe != nil && probe()
		}
		if !inPath {
			r.AsyncProbe = true
			return desired, false
		}
		if in.Decider.PredictedIdle {
			// The activator is in the path; the keep-alive policy, not a
			// fixed grace or retention, says when the last pod goes.
			return desired, true
		}
		inactiveFor := in.ActiveAge
		retention := time.Duration(0)
		if in.Reachability != Unreachable {
			retention = rev.ScaleToZeroPodRetention()
		}
		if inactiveFor >= max(cfg.ScaleToZeroGracePeriod, retention) {
			return desired, true
		}
		if retention > 0 && inactiveFor < retention {
			r.Requeue = append(r.Requeue, retention-inactiveFor)
			return desired, false
		}
		if wait := cfg.ScaleToZeroGracePeriod - in.SKS.ProxyFor; wait > 0 {
			r.Requeue = append(r.Requeue, wait)
			return desired, false
		}
		return desired, true
	}
}

// SKSModeFor puts the activator in the path unless the revision wants pods
// and has non-negative excess burst capacity.
func SKSModeFor(want, excessBurstCapacity int32) SKSMode {
	if want > 0 && excessBurstCapacity >= 0 {
		return SKSServe
	}
	return SKSProxy
}

// NumActivators is the activator subset size: 2 with TBC 0, else
// max(2, ⌈(ready × total + max(TBC, 0)) / activator capacity⌉).
func NumActivators(ready int32, tbc, total, activatorCapacity float64) int32 {
	if tbc == 0 {
		return MinActivators
	}
	capacity := float64(ready) * total
	if tbc > 0 {
		capacity += tbc
	}
	n := math.Max(MinActivators, math.Ceil(capacity/activatorCapacity))
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(n)
}

// ActiveThreshold is minReady: max(min-scale, initial scale) before the
// target is initialised, else max(min-scale, 1).
func ActiveThreshold(rev *kpaconfig.Revision, initialized bool) int32 {
	lo, _ := rev.ScaleBounds()
	if !initialized {
		return max(lo, rev.InitialScale())
	}
	return max(lo, 1)
}

// computeStatus is Knative's computeStatus and computeActiveCondition (spec
// §6.2 step 9, §6.5).
func computeStatus(r *Result, in *Input, want, ready int32, serviceNameSet bool) {
	r.ActualScale = ready
	r.DesiredScale = want
	if want == kpaspec.ScaleUnknown && in.PriorDesiredScale != nil && *in.PriorDesiredScale >= 0 {
		// Keep the old value over an autoscaler restart.
		r.DesiredScale = *in.PriorDesiredScale
	}

	minReady := ActiveThreshold(&in.Revision, in.ScaleTargetInitialized)
	r.ScaleTargetInitialized = in.ScaleTargetInitialized || (ready >= minReady && serviceNameSet)

	cur := in.Active
	next := cur
	switch {
	case want == 0 || minReady == 0:
		if cur.Status == ConditionUnknown && minReady > 0 {
			next = Condition{Status: ConditionFalse, Reason: ReasonTimedOut, Message: MessageTimedOut}
		} else {
			next = Condition{Status: ConditionFalse, Reason: ReasonNoTraffic, Message: MessageNoTraffic}
		}
	case ready < minReady:
		if want > 0 || cur.Status != ConditionFalse {
			next = Condition{Status: ConditionUnknown, Reason: ReasonQueued, Message: MessageQueued}
		} else {
			next = Condition{Status: ConditionFalse, Reason: ReasonNoTraffic, Message: MessageNoTraffic}
		}
	case want > 0 || cur.Status != ConditionFalse:
		next = Condition{Status: ConditionTrue}
	}
	r.Active = next
	r.ActiveChanged = next.Status != cur.Status || next.Reason != cur.Reason ||
		(cur.Message != "" && next.Message != cur.Message)
}

// ReconcileLag applies what the lag strategy needs of the reconciler: the
// decider already capped the scale at the partition count and applied the
// idle timeout, so only min-scale and max-scale bound it here.
func ReconcileLag(in Input) Result {
	r := Result{Want: in.Decider.DesiredScale, DesiredScale: in.Decider.DesiredScale, ActualScale: in.ReadyPods, Active: in.Active}
	if r.DesiredScale < 0 && in.PriorDesiredScale != nil {
		r.DesiredScale = *in.PriorDesiredScale
	}
	r.ScaleTargetInitialized = in.ScaleTargetInitialized || in.ReadyPods >= 1 || r.Want == 0
	if r.Want >= 0 {
		lo, hi := in.Revision.ScaleBounds()
		r.Want = ApplyBounds(lo, hi, r.Want)
		r.DesiredScale = r.Want
		if in.Replicas == nil || *in.Replicas != r.Want {
			p := r.Want
			r.Patch = &p
		}
	}
	next := in.Active
	switch {
	case r.Want == 0:
		next = Condition{Status: ConditionFalse, Reason: ReasonNoTraffic, Message: MessageNoTraffic}
	case r.Want > 0 && in.ReadyPods == 0:
		next = Condition{Status: ConditionUnknown, Reason: ReasonQueued, Message: MessageQueued}
	case r.Want > 0:
		next = Condition{Status: ConditionTrue}
	}
	r.Active = next
	r.ActiveChanged = next.Status != in.Active.Status || next.Reason != in.Active.Reason
	return r
}
