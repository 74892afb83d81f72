package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// TestScaleRefusesKindsNotAllowed: only the kinds in --scale-kinds are
// scaled or read; a Pod, or any core kind not listed, is refused naming
// the kind, and nothing is written.
func TestScaleRefusesKindsNotAllowed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	mem := scale.NewMemory()
	h := newHandler(memoryEngine{scale.New(mem, func() time.Time { return now })}, nil, zap.NewNop())
	h.now = func() time.Time { return now }
	var kinds scale.Kinds
	kinds.RegisterFlags(flag.NewFlagSet("t", flag.PanicOnError)) // the defaults
	h.useKinds(&kinds, prometheus.NewRegistry())
	tests := []struct {
		name     string
		ref      *commonv1.TargetRef
		code     codes.Code
		mentions string
	}{
		{"a Deployment, by default", &commonv1.TargetRef{Namespace: "ns", Name: "web"}, codes.OK, ""},
		{"a StatefulSet", &commonv1.TargetRef{Namespace: "ns", Name: "db", ApiVersion: "apps/v1", Kind: "StatefulSet"}, codes.OK, ""},
		{"a ReplicaSet", &commonv1.TargetRef{Namespace: "ns", Name: "rs", ApiVersion: "apps/v1", Kind: "ReplicaSet"}, codes.OK, ""},
		{"a Pod", &commonv1.TargetRef{Namespace: "ns", Name: "web-0", ApiVersion: "v1", Kind: "Pod"}, codes.PermissionDenied, `"Pod" (core/Pod)`},
		{"a ReplicationController, not listed", &commonv1.TargetRef{Namespace: "ns", Name: "rc", ApiVersion: "v1", Kind: "ReplicationController"}, codes.PermissionDenied, "ReplicationController"},
		{"a custom resource, not listed", &commonv1.TargetRef{Namespace: "ns", Name: "s", ApiVersion: "test.tidal.dev/v1", Kind: "Scalable"}, codes.PermissionDenied, "test.tidal.dev/Scalable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: tt.ref, DesiredReplicas: 3, DecisionSequence: uint64(now.UnixMilli())})
			if status.Code(err) != tt.code || (err != nil && (!strings.Contains(err.Error(), "target.kind") || !strings.Contains(err.Error(), tt.mentions))) {
				t.Errorf("Scale = %v, want %s mentioning target.kind and %s", err, tt.code, tt.mentions)
			}
			_, err = h.GetScale(context.Background(), &actuatorv1.GetScaleRequest{Target: tt.ref})
			if tt.code != codes.OK && status.Code(err) != tt.code {
				t.Errorf("GetScale = %v, want %s", err, tt.code)
			}
		})
	}
	if n, err := mem.GetReplicas(context.Background(), scale.Target{Namespace: "ns", Name: "web-0", APIVersion: "v1", Kind: "Pod"}); err == nil && n != 0 {
		t.Errorf("the Pod has %d replicas written, want none", n)
	}
	// An operator may allow a custom resource with /scale.
	if err := kinds.Set("apps/Deployment,test.tidal.dev/Scalable"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Scale(context.Background(), &actuatorv1.ScaleRequest{Target: tests[5].ref, DesiredReplicas: 2, DecisionSequence: uint64(now.UnixMilli())}); err != nil {
		t.Errorf("Scale of an allowed custom resource = %v", err)
	}
}
