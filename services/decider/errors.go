package main

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

var errWatcherTooSlow = status.Error(codes.ResourceExhausted, "watcher too slow: it fell a whole buffer of decisions (--watch-buffer) behind; reconnect to resume")

// errWatchRefused refuses a watcher beyond the decider's or the caller's bound.
func errWatchRefused(err error) error {
	return status.Errorf(codes.ResourceExhausted, "WatchDecisions refused: %v; close a stream or retry later", err)
}

func errUnknownTarget(ref *commonv1.TargetRef) error {
	return status.Errorf(codes.NotFound, "target %s: this decider holds no such target", ref.Key())
}
