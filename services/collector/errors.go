package main

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func errUnknownTarget(ref *commonv1.TargetRef) error {
	return status.Errorf(codes.NotFound, "target %s: not known to this collector", ref.Key())
}

// errUnknownPushed refuses a PushStats call naming a target this collector
// does not measure; nothing in the call is recorded.
func errUnknownPushed(field string, ref *commonv1.TargetRef) error {
	return status.Errorf(codes.NotFound, "invalid %s %q: want a target with a Metric, PodAutoscaler or Function this collector measures; no stat of the call was recorded", field, ref.Key())
}

// errTargetLimit refuses a PushStats call that would create a target beyond
// --max-targets; nothing in the call is recorded.
func errTargetLimit(field string, ref *commonv1.TargetRef) error {
	return status.Errorf(codes.ResourceExhausted, "%s %q: this collector holds --max-targets targets; idle pushed targets expire after --pushed-target-ttl; no stat of the call was recorded", field, commonv1.Prefix(ref.Key()))
}

// errNotOwner refuses a stat for a target another collector replica owns;
// the message names the owner so the caller can send it there.
func errNotOwner(field string, ref *commonv1.TargetRef, owner string) error {
	return status.Errorf(codes.FailedPrecondition, "invalid %s %q: owned by collector %s, send it there; no stat of the call was recorded", field, ref.Key(), owner)
}

func errStopping(err error) error {
	return status.Errorf(codes.Unavailable, "collector busy or stopping: %v", err)
}

// errBadPageToken refuses a page token that decodes but is no cursor of
// this collector's (a decider's, say).
func errBadPageToken(token string) error {
	return status.Error(codes.InvalidArgument, commonv1.Invalid("page_token", token, "empty or the next_page_token of an earlier ListTargets response").Error())
}
