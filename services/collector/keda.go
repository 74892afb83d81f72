package main

import (
	"fmt"

	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tidalscale/tidal/collector/kedascaler"
	"github.com/tidalscale/tidal/collector/stream"
	"github.com/tidalscale/tidal/collector/targets"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// deciderRouter is kedascaler.Router over the collector's streams: the
// owner by the hub's rendezvous hashing, the connection the stream uses.
type deciderRouter struct {
	hub     *stream.Hub
	streams *stream.Streams
}

func (r deciderRouter) Owner(ref *commonv1.TargetRef) (string, bool) { return r.hub.DeciderOf(ref) }

func (r deciderRouter) Conn(addr string) (grpc.ClientConnInterface, bool) {
	conn, ok := r.streams.Conn(addr)
	if !ok {
		return nil, false
	}
	return conn, true
}

// kubeTargets is kedascaler.Targets over the discovery's informer caches.
type kubeTargets struct{ disc *targets.Discovery }

func (k kubeTargets) Target(f kedascaler.Follow) (*commonv1.TargetRef, error) {
	var (
		ref *commonv1.TargetRef
		err error
	)
	switch f.Kind {
	case kedascaler.KindPodAutoscaler:
		ref, err = k.disc.PodAutoscalerTarget(f.Namespace, f.Name)
	case kedascaler.KindFunction:
		ref, err = k.disc.FunctionTarget(f.Namespace, f.Name)
	default:
		return nil, fmt.Errorf("%s: unknown kind", f)
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: no %s in the cluster", kedascaler.ErrNoObject, f)
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", f, err)
	}
	return ref, nil
}
