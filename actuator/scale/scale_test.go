package scale

import (
	"context"
	"errors"
	"testing"
	"time"
)

// failing is a Scaler whose writes fail, to prove a failed write records nothing.
type failing struct{ *Memory }

func (*failing) SetReplicas(context.Context, Target, int32) error { return errors.New("boom") }

func TestApplierSequence(t *testing.T) {
	tgt := Target{Namespace: "ns", Name: "fn"}
	type step struct {
		d       Decision
		want    Result
		wantRep int32
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "applies in order and refuses an older decision",
		steps: []step{
			{Decision{Target: tgt, Desired: 3, Sequence: 1}, Result{Applied: 3, Previous: 0, Changed: true, LastSequence: 1}, 3},
			{Decision{Target: tgt, Desired: 5, Sequence: 3}, Result{Applied: 5, Previous: 3, Changed: true, LastSequence: 3}, 5},
			{Decision{Target: tgt, Desired: 1, Sequence: 2}, Result{Applied: 5, Previous: 5, Stale: true, LastSequence: 3}, 5},
		},
	}, {
		name: "same decision twice writes once",
		steps: []step{
			{Decision{Target: tgt, Desired: 2, Sequence: 7}, Result{Applied: 2, Changed: true, LastSequence: 7}, 2},
			{Decision{Target: tgt, Desired: 2, Sequence: 7}, Result{Applied: 2, Previous: 2, LastSequence: 7}, 2},
		},
	}, {
		name: "dry run reports and changes nothing",
		steps: []step{
			{Decision{Target: tgt, Desired: 4, Sequence: 1, DryRun: true}, Result{Applied: 4}, 0},
			{Decision{Target: tgt, Desired: 4, Sequence: 1}, Result{Applied: 4, Changed: true, LastSequence: 1}, 4},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := NewMemory()
			a := New(mem, time.Now)
			for i, s := range tt.steps {
				got, err := a.Apply(context.Background(), s.d)
				if err != nil {
					t.Fatalf("step %d: Apply: %v", i, err)
				}
				if got != s.want {
					t.Errorf("step %d: Apply = %+v, want %+v", i, got, s.want)
				}
				if r, _ := mem.GetReplicas(context.Background(), tgt); r != s.wantRep {
					t.Errorf("step %d: replicas = %d, want %d", i, r, s.wantRep)
				}
			}
		})
	}
}

func TestApplierFailedWriteRecordsNothing(t *testing.T) {
	tgt := Target{Namespace: "ns", Name: "fn"}
	a := New(&failing{Memory: NewMemory()}, time.Now)
	if _, err := a.Apply(context.Background(), Decision{Target: tgt, Desired: 3, Sequence: 5}); err == nil {
		t.Fatal("Apply succeeded through a failing scaler")
	}
	st, err := a.Get(context.Background(), tgt)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastSequence != 0 {
		t.Errorf("LastSequence = %d after a failed write, want 0", st.LastSequence)
	}
}
