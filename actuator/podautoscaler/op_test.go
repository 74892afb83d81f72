package podautoscaler

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
)

var (
	web    = cache.ObjectName{Namespace: "ns", Name: "web"}
	target = scale.Target{Namespace: "ns", Name: "web"}
)

func TestStartChecksBounds(t *testing.T) {
	tests := []struct {
		name     string
		req      scale.Decision
		maxScale int32
		want     string // error substring; empty means accepted
	}{
		{"within max-scale", scale.Decision{Target: target, Desired: 3, Sequence: 1}, 3, ""},
		{"no max-scale", scale.Decision{Target: target, Desired: 1000, Sequence: 1}, 0, ""},
		{"above max-scale", scale.Decision{Target: target, Desired: 4, Sequence: 1}, 3, "desired_replicas 4 for ns/web: podautoscaler ns/web has max-scale 3"},
		{"sequence beyond int64", scale.Decision{Target: target, Desired: 1, Sequence: math.MaxInt64 + 1}, 0, "decision_sequence 9223372036854775808 for ns/web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := startOp(tt.req, "podautoscaler", web, tt.maxScale)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("startOp = %v, want accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrOutOfRange)):
				t.Errorf("startOp = %v, want ErrOutOfRange with %q", err, tt.want)
			}
		})
	}
}

func TestAttemptComparesWithTheRecordedDecision(t *testing.T) {
	recorded := &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: 5, DesiredScale: 2}
	tests := []struct {
		name      string
		req       scale.Decision
		rec       *autoscalingv1alpha1.PodAutoscalerDecision
		record    bool // a decision to record
		done      bool
		wantStale bool
	}{
		{"none recorded", scale.Decision{Desired: 2, Sequence: 1}, nil, true, false, false},
		{"newer", scale.Decision{Desired: 3, Sequence: 6}, recorded, true, false, false},
		{"older: stale", scale.Decision{Desired: 3, Sequence: 4}, recorded, false, true, true},
		{"the recorded one again: converge only", scale.Decision{Desired: 2, Sequence: 5}, recorded, false, false, false},
		{"the recorded one again in a dry run", scale.Decision{Desired: 2, Sequence: 5, DryRun: true}, recorded, true, false, false},
		{"same sequence, another scale", scale.Decision{Desired: 4, Sequence: 5}, recorded, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := startOp(tt.req, "podautoscaler", web, 0)
			if err != nil {
				t.Fatal(err)
			}
			ebc := int32(7)
			now := time.Unix(1_800_000_000, 0)
			op.stamp(&ebc, "", false, now)
			dec, done := op.attempt(tt.rec)
			if (dec != nil) != tt.record || done != tt.done || op.stale != tt.wantStale {
				t.Fatalf("Attempt = %v, %v (stale %v); want a decision %v, done %v, stale %v", dec, done, op.stale, tt.record, tt.done, tt.wantStale)
			}
			if dec != nil && (dec.Sequence != int64(tt.req.Sequence) || dec.DesiredScale != tt.req.Desired || *dec.ExcessBurstCapacity != 7 || !dec.Time.Time.Equal(now)) {
				t.Errorf("decision = %+v, want the request's, stamped %v", dec, now)
			}
		})
	}
}

// recordedAt is a recorded decision at sequence seq; nil for 0.
func recordedAt(seq uint64) *autoscalingv1alpha1.PodAutoscalerDecision {
	if seq == 0 {
		return nil
	}
	return &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: int64(seq)}
}

// scalerOf reads every target's scale as replicas.
type scalerOf int32

func (s scalerOf) GetScale(context.Context, scale.Target) (scale.Scale, error) {
	return scale.Scale{Replicas: int32(s)}, nil
}

func TestFinishMakesTheResult(t *testing.T) {
	pa := &corev1.ObjectReference{Kind: "PodAutoscaler", Namespace: "ns", Name: "web"}
	refused := errors.New("no scale subresource")
	tests := []struct {
		name    string
		req     scale.Decision
		last    uint64 // recorded sequence the attempt sees
		out     Outcome
		err     error
		on      runtime.Object
		want    scale.Result
		wantErr string
		requeue time.Duration
		event   string
	}{
		{name: "applied", req: scale.Decision{Desired: 3, Sequence: 6}, last: 5, out: Outcome{Before: 1, After: 3, Patched: true, Requeue: time.Second}, on: pa,
			want: scale.Result{Applied: 3, Previous: 1, Changed: true, LastSequence: 6}, requeue: time.Second},
		{name: "dry run", req: scale.Decision{Desired: 3, Sequence: 6, DryRun: true}, last: 5, out: Outcome{Before: 1, After: 3, Requeue: time.Second}, on: pa,
			want: scale.Result{Applied: 3, Previous: 1, LastSequence: 5}},
		{name: "stale", req: scale.Decision{Desired: 1, Sequence: 4}, last: 5, on: pa,
			want: scale.Result{Applied: 2, Previous: 2, Stale: true, LastSequence: 5}, event: "Warning StaleDecision refused decision 4 (1 replicas): older than decision 5 already applied"},
		{name: "reconcile failed", req: scale.Decision{Desired: 3, Sequence: 6}, last: 5, out: Outcome{Requeue: time.Second}, err: errors.New("conflict"), on: pa,
			wantErr: "podautoscaler ns/web: conflict", requeue: time.Second},
		{name: "deleted", req: scale.Decision{Desired: 3, Sequence: 6}, last: 5,
			wantErr: "target ns/web: podautoscaler ns/web was deleted"},
		{name: "refused", req: scale.Decision{Desired: 3, Sequence: 6}, last: 5, out: Outcome{Refused: refused}, on: pa,
			wantErr: "podautoscaler ns/web: no scale subresource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Target = target
			op, err := startOp(tt.req, "podautoscaler", web, 0)
			if err != nil {
				t.Fatal(err)
			}
			op.stamp(nil, "", false, time.Now())
			op.attempt(recordedAt(tt.last))
			rec := record.NewFakeRecorder(4)
			var requeued time.Duration
			res, err := op.finish(context.Background(), host{scaler: scalerOf(2), recorder: rec, requeue: func(d time.Duration) { requeued = d }}, tt.out, tt.err, tt.on)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("finish = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil || res != tt.want {
				t.Errorf("finish = %+v, %v; want %+v", res, err, tt.want)
			}
			if tt.name == "deleted" && !errors.Is(err, scale.ErrNotFound) {
				t.Errorf("finish on a deleted PodAutoscaler = %v, want scale.ErrNotFound", err)
			}
			if tt.name == "refused" && !errors.Is(err, refused) {
				t.Errorf("finish = %v, want the refusal wrapped", err)
			}
			if requeued != tt.requeue {
				t.Errorf("requeued after %v, want %v", requeued, tt.requeue)
			}
			var event string
			select {
			case event = <-rec.Events:
			default:
			}
			if event != tt.event {
				t.Errorf("event %q, want %q", event, tt.event)
			}
		})
	}
}

func TestOnlyOneScalesATarget(t *testing.T) {
	pa := func(name string, deleting bool) any {
		p := &autoscalingv1alpha1.PodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	tests := []struct {
		name    string
		objs    []any
		want    string // the name found; empty means none
		wantErr string
	}{
		{"none", nil, "", ""},
		{"one", []any{pa("a", false)}, "a", ""},
		{"one and one being deleted", []any{pa("old", true), pa("a", false)}, "a", ""},
		{"only one being deleted", []any{pa("old", true)}, "", ""},
		{"two", []any{pa("a", false), pa("b", false)}, "", "target ns/web: podautoscalers a and b both scale it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := only[*autoscalingv1alpha1.PodAutoscaler](tt.objs, target, "podautoscalers")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || got != nil {
					t.Errorf("only = %v, %v; want the error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || (got == nil) != (tt.want == "") || got != nil && got.Name != tt.want {
				t.Errorf("only = %v, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestStatusReadsReplicasAndTheRecordedDecision(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	rec := &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: 9, DesiredScale: 3, Reason: "panic", Time: metav1.NewTime(at)}
	for _, tt := range []struct {
		name string
		rec  *autoscalingv1alpha1.PodAutoscalerDecision
		want scale.Status
	}{
		{"none recorded", nil, scale.Status{Replicas: 2}},
		{"recorded", rec, scale.Status{Replicas: 2, LastSequence: 9, LastReason: "panic", LastApplied: at}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := targetStatus(context.Background(), scalerOf(2), target, tt.rec)
			if err != nil || st.Replicas != tt.want.Replicas || st.LastSequence != tt.want.LastSequence || st.LastReason != tt.want.LastReason || !st.LastApplied.Equal(tt.want.LastApplied) {
				t.Errorf("targetStatus = %+v, %v; want %+v", st, err, tt.want)
			}
		})
	}
}
