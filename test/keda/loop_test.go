package keda

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/test/cluster"
)

// kedaTick stands for both KEDA's pollingInterval and the HPA's 15 s sync,
// shortened so the test takes seconds.
const kedaTick = time.Second

// kedaLoop plays KEDA's operator and the HPA it makes for one ScaledObject,
// on the answers of KEDA's own scaler: a push of true, or an active poll,
// takes the Deployment from 0 to max(1, min) at once; while it runs, the
// HPA's formula on the metric sets its replicas within [max(1, min), max];
// after cooldown without activity it goes to min. It applies no HPA
// behavior: the README's example lets the HPA follow at once. An error from
// the scaler changes nothing (the examples have no fallback).
type kedaLoop struct {
	scaler scalers.Scaler
	metric string
	// target is the metric's AverageValue target in milli-units.
	target int64
	// pushed is the push scaler's reports; nil for type external.
	pushed *activityLog

	client         *cluster.Cluster
	ns, deployment string
	min, max       int32
	cooldown       time.Duration

	mu      sync.Mutex
	changes []scaleEvent
}

// scaleEvent is one change KEDA made to the Deployment's replicas.
type scaleEvent struct {
	at       time.Time
	from, to int32
	why      string // push, poll, hpa, cooldown
}

func (s scaleEvent) String() string {
	return fmt.Sprintf("%d→%d (%s) at %s", s.from, s.to, s.why, s.at.Format("15:04:05.000"))
}

func (l *kedaLoop) run(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(kedaTick)
	defer tick.Stop()
	var push <-chan struct{} // nil, never ready, without a push scaler
	if l.pushed != nil {
		push = l.pushed.changed
	}
	var lastActive time.Time
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-push:
			// KEDA acts on a pushed true at once.
			evs := l.pushed.events()
			fresh := evs[seen:]
			seen = len(evs)
			for _, ev := range fresh {
				if ev.active {
					lastActive = ev.at
					l.fromZero(ctx, t, "push")
				}
			}
			continue
		case <-tick.C:
		}
		vals, active, err := l.scaler.GetMetricsAndActivity(ctx, l.metric)
		if err != nil || len(vals) != 1 {
			continue
		}
		cur, err := l.replicas(ctx)
		if err != nil {
			t.Logf("KEDA loop: %v", err)
			continue
		}
		switch {
		case active:
			lastActive = time.Now()
			cur = l.fromZero(ctx, t, "poll")
		case cur > 0 && l.min == 0 && !lastActive.IsZero() && time.Since(lastActive) >= l.cooldown:
			l.scale(ctx, t, cur, 0, "cooldown")
			continue
		}
		if cur < 1 {
			continue // the HPA does not run at zero
		}
		want := min(max(hpaReplicas(vals[0].Value.MilliValue(), l.target, cur), max(1, l.min)), l.max)
		if want != cur {
			l.scale(ctx, t, cur, want, "hpa")
		}
	}
}

// fromZero scales from 0 to max(1, min) and returns the replicas now.
func (l *kedaLoop) fromZero(ctx context.Context, t *testing.T, why string) int32 {
	cur, err := l.replicas(ctx)
	if err != nil {
		t.Logf("KEDA loop: %v", err)
		return -1
	}
	if cur == 0 {
		cur = l.scale(ctx, t, 0, max(1, l.min), why)
	}
	return cur
}

func (l *kedaLoop) replicas(ctx context.Context) (int32, error) {
	s, err := l.client.Client.AppsV1().Deployments(l.ns).GetScale(ctx, l.deployment, metav1.GetOptions{})
	if err != nil {
		return -1, fmt.Errorf("scale of %s/%s: %w", l.ns, l.deployment, err)
	}
	return s.Spec.Replicas, nil
}

// scale sets the replicas through the scale subresource, as KEDA and the
// HPA do, and returns them.
func (l *kedaLoop) scale(ctx context.Context, t *testing.T, from, to int32, why string) int32 {
	// The Deployment controller's status writes change the resource
	// version under the scale; try again with a fresh read, as controllers do.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := l.client.Client.AppsV1().Deployments(l.ns).GetScale(ctx, l.deployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = to
		_, err = l.client.Client.AppsV1().Deployments(l.ns).UpdateScale(ctx, l.deployment, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			t.Logf("KEDA loop: scale %s/%s to %d: %v", l.ns, l.deployment, to, err)
		}
		return from
	}
	l.mu.Lock()
	if len(l.changes) < maxEvents {
		l.changes = append(l.changes, scaleEvent{at: time.Now(), from: from, to: to, why: why})
	}
	l.mu.Unlock()
	return to
}

func (l *kedaLoop) events() []scaleEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]scaleEvent(nil), l.changes...)
}

// waitFor returns the first change that satisfies cond.
func (l *kedaLoop) waitFor(t *testing.T, timeout time.Duration, what string, cond func(scaleEvent) bool) scaleEvent {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range l.events() {
			if cond(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; KEDA's changes: %v", timeout, what, l.events())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tidalClient is a client of tidal's custom resources in c.
func tidalClient(c *cluster.Cluster) (tidalclient.Interface, error) {
	return tidalclient.NewForConfig(c.Config())
}
