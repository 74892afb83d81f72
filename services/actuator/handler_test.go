package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/actuator/scale"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// TestSequenceFarAheadIsRefused: one call with a sequence far in the future
// used to make every later real decision stale, freezing the target.
func TestSequenceFarAheadIsRefused(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := newHandler(memoryEngine{scale.New(scale.NewMemory(), func() time.Time { return now })}, nil, zap.NewNop())
	h.now = func() time.Time { return now }
	target := &commonv1.TargetRef{Namespace: "ns", Name: "web"}
	tests := []struct {
		name string
		seq  uint64
		code codes.Code
	}{
		{"the decider's clock a little ahead", uint64(now.Add(time.Minute).UnixMilli()), codes.OK},
		{"the largest sequence there is", 1<<64 - 1, codes.InvalidArgument},
		{"an hour ahead", uint64(now.Add(time.Hour).UnixMilli()), codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: 3, DecisionSequence: tt.seq})
			if status.Code(err) != tt.code || (err != nil && !strings.Contains(err.Error(), "decision_sequence")) {
				t.Errorf("Scale(sequence %d) = %v, want %s naming decision_sequence", tt.seq, err, tt.code)
			}
		})
	}
	// A real decision still lands after the refused ones.
	res, err := h.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: 2, DecisionSequence: uint64(now.Add(2 * time.Minute).UnixMilli())})
	if err != nil || res.GetStale() || res.GetAppliedReplicas() != 2 {
		t.Errorf("a real decision after the refused ones = %v, %v; want applied", res, err)
	}
}

// TestReasonLosesControlCharacters: a reason reaches status, Events and
// logs, so a caller's newlines and terminal escapes are replaced.
func TestReasonLosesControlCharacters(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := newHandler(memoryEngine{scale.New(scale.NewMemory(), func() time.Time { return now })}, nil, zap.NewNop())
	h.now = func() time.Time { return now }
	target := &commonv1.TargetRef{Namespace: "ns", Name: "web"}
	if _, err := h.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: target, DesiredReplicas: 2,
		DecisionSequence: uint64(now.UnixMilli()), Reason: "stable\n{\"level\":\"error\"}\x1b[2J"}); err != nil {
		t.Fatal(err)
	}
	got, err := h.GetScale(context.Background(), &actuatorv1.GetScaleRequest{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	if want := "stable {\"level\":\"error\"} [2J"; got.GetLastReason() != want {
		t.Errorf("recorded reason = %q, want %q", got.GetLastReason(), want)
	}
}
