package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/kedascaler"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/targets"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/shard/bucket"
)

// deciderRouter is kedascaler.Router over the collector's streams: the
// owner by the hub's rendezvous hashing, the connection the stream uses.
type deciderRouter struct {
	hub     *dispatch.Hub
	streams *dispatch.Streams
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

// bucketOwners is kedascaler.Owners over the collector's bucket Leases.
type bucketOwners struct{ buckets *bucket.Set }

func (b bucketOwners) Owner(ref *commonv1.TargetRef) (string, bool) {
	return b.buckets.Owner(ref.Key())
}

// kedaInline wires inline Kafka: triggers measured by this replica's lag
// reader into its hub, KEDA's arithmetic from tidal's own lag strategy
// (kedascaler.NewKafkaScaler), and with buckets the owner of each trigger's
// bucket, reached over the collectors' mutual TLS. Close the returned pool once the server has stopped.
func kedaInline(cfg *config, hub *dispatch.Hub, fetcher *lag.Fetcher, buckets *bucket.Set, reg prometheus.Registerer, log *zap.Logger) (*kedascaler.Inline, *kedascaler.PeerPool, error) {
	opt, err := cfg.server.DialOption(server.RoleCollector)
	if err != nil {
		return nil, nil, err
	}
	peers := kedascaler.NewPeerPool(func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, opt) })
	in := &kedascaler.Inline{Peers: peers}
	var owns func(*commonv1.TargetRef) bool
	if buckets != nil {
		in.Owners = bucketOwners{buckets}
		owns = func(ref *commonv1.TargetRef) bool { return buckets.Owns(ref.Key()) }
	}
	in.Triggers = kedascaler.NewTriggers(cfg.keda, hub, fetcher, kedascaler.NewKafkaScaler, owns, reg, log.With(zap.String("component", "keda")))
	return in, peers, nil
}
