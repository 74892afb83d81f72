package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/tidalscale/tidal/collector/activator"
	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/kedascaler"
	"github.com/tidalscale/tidal/collector/targets"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/shard/bucket"
)

// activatorEndpoint wires Knative's activator protocol when
// --activator-listen is set: stats into the hub as PushStats records
// them, those for targets another replica owns forwarded to it over the
// collectors' mutual TLS (ActivatorStatService, which it registers), its
// forwarder run in g. A stat's target is its revision's PodAutoscaler's
// scale target in Knative mode (--knative, with Kubernetes discovery: disc
// set), else Knative's naming rule. The endpoint is returned unbound; nil
// when off.
func activatorEndpoint(gctx context.Context, g *errgroup.Group, cfg *config, hub *dispatch.Hub, buckets *bucket.Set, peers *kedascaler.PeerPool,
	disc *targets.Discovery, srv *server.Server, reg prometheus.Registerer, log *zap.Logger) *activator.Server {
	if !cfg.activator.Enabled() {
		return nil
	}
	log = log.With(zap.String("component", "activator"))
	m := activator.NewMetrics(reg)
	local := activator.HubRecorder{Hub: hub, Implicit: cfg.discovery == discoveryPush, Wait: cfg.activator.BacklogWait}
	var (
		owners activator.Owners
		fwd    *activator.Forwarder
	)
	if buckets != nil {
		owners = func(ref *commonv1.TargetRef) (string, bool) { return buckets.Owner(ref.Key()) }
		fwd = activator.NewForwarder(cfg.activator, activatorPeers{peers}, m, log)
		g.Go(func() error { return fwd.Run(gctx) })
	}
	collectorv1.RegisterActivatorStatServiceServer(srv.GRPC(), activator.NewPeerService(owners, local, m, time.Now))
	resolve := activator.RevisionDeployment
	if disc != nil && cfg.targets.Knative.Enabled {
		resolve = activator.ByPodAutoscaler(disc.KnativeScaleTarget, m, log)
	}
	router := activator.NewRouter(resolve, owners, local, fwd, m, log)
	return activator.New(cfg.activator, router, m, log)
}

// activatorPeers is activator.Peers over the collectors' shared pool.
type activatorPeers struct{ pool *kedascaler.PeerPool }

func (p activatorPeers) ForwardActivatorStats(ctx context.Context, addr string, req *collectorv1.ForwardActivatorStatsRequest) (*collectorv1.ForwardActivatorStatsResponse, error) {
	c, err := p.pool.Conn(addr)
	if err != nil {
		return nil, err
	}
	return collectorv1.NewActivatorStatServiceClient(c).ForwardActivatorStats(ctx, req)
}
