package main

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tidalscale/tidal/actuator/deployer"
	"github.com/tidalscale/tidal/actuator/knative"
	"github.com/tidalscale/tidal/actuator/podautoscaler"
	"github.com/tidalscale/tidal/actuator/scale"
	"github.com/tidalscale/tidal/actuator/writebudget"
)

var errDeployerNotWired = status.Error(codes.FailedPrecondition, "the function Deployer needs a Kubernetes cluster: run with --scaler=kubernetes")

// toStatus maps a domain error to the gRPC status callers branch on.
func toStatus(err error) error {
	var fe *deployer.FieldError
	switch {
	case errors.Is(err, scale.ErrNotFound), apierrors.IsNotFound(err):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, scale.ErrNoScaleSubresource), errors.Is(err, podautoscaler.ErrInvalidPodAutoscaler),
		errors.Is(err, knative.ErrNotOwned):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, podautoscaler.ErrOutOfRange), errors.Is(err, deployer.ErrOverCap), errors.As(err, &fe),
		apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, writebudget.ErrFull), errors.Is(err, writebudget.ErrDeferred):
		return status.Error(codes.ResourceExhausted, err.Error())
	case apierrors.IsConflict(err):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}
