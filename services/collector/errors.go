package main

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func errUnknownTarget(ref *commonv1.TargetRef) error {
	return status.Errorf(codes.NotFound, "target %s: not known to this collector", ref.Key())
}
