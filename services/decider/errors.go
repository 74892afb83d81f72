package main

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

var errWatcherTooSlow = status.Error(codes.ResourceExhausted, "watcher fell more than 1024 decisions behind; reconnect to resume")

func errUnknownTarget(ref *commonv1.TargetRef) error {
	return status.Errorf(codes.NotFound, "target %s: this decider holds no such target", ref.Key())
}
