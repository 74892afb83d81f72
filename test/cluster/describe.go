package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Describe reports what a test waiting on pods needs when the wait times out:
// the node's conditions and taints, the Deployments, ReplicaSets and pods of
// ns with their status, the namespace's latest events, and the tail of the
// controller manager's, scheduler's and kwok's logs. It never fails: a part
// it cannot read says so.
func (c *Cluster) Describe(ctx context.Context, ns string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "=== cluster state for namespace %s, %s after start\n", ns, time.Since(c.startedAt).Round(time.Millisecond))

	if n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "node %s: %v\n", NodeName, err)
	} else {
		fmt.Fprintf(&b, "node %s: taints %v, unschedulable %t\n", n.Name, n.Spec.Taints, n.Spec.Unschedulable)
		for _, cond := range n.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s heartbeat %s (%s)\n", cond.Type, cond.Status, cond.LastHeartbeatTime.Format(time.RFC3339), cond.Reason)
		}
	}

	if ds, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "deployments: %v\n", err)
	} else {
		for _, d := range ds.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			fmt.Fprintf(&b, "deployment %s: spec %d, status replicas %d ready %d available %d, generation %d observed %d\n",
				d.Name, want, d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas, d.Generation, d.Status.ObservedGeneration)
		}
	}
	if rs, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "replicasets: %v\n", err)
	} else {
		for _, r := range rs.Items {
			want := int32(1)
			if r.Spec.Replicas != nil {
				want = *r.Spec.Replicas
			}
			fmt.Fprintf(&b, "replicaset %s: spec %d, status replicas %d ready %d\n", r.Name, want, r.Status.Replicas, r.Status.ReadyReplicas)
		}
	}
	if ps, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		for _, p := range ps.Items {
			fmt.Fprintf(&b, "pod %s: node %q phase %s ip %q deleting %t created %s conditions %s\n",
				p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.DeletionTimestamp != nil,
				p.CreationTimestamp.Format(time.RFC3339), podConditions(p.Status.Conditions))
		}
	}
	if evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	} else {
		items := evs.Items
		sort.Slice(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
		if len(items) > 30 {
			items = items[len(items)-30:]
		}
		for _, e := range items {
			fmt.Fprintf(&b, "event %s %s %s/%s %s: %s\n", eventTime(e).Format(time.RFC3339), e.Type,
				e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}

	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		switch p.name {
		case "kube-controller-manager", "kube-scheduler", "kwok":
			b.WriteString(p.logTail(20))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func podConditions(conds []corev1.PodCondition) string {
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.CreationTimestamp.Time
	}
}
