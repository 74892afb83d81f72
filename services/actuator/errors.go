package main

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/actuator/scale"
)

var errDeployerNotWired = status.Error(codes.Unimplemented, "the function Deployer needs a Kubernetes cluster; it is not wired into this build yet")

// toStatus maps a domain error to the gRPC status callers branch on.
func toStatus(err error) error {
	switch {
	case errors.Is(err, scale.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}
