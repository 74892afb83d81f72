package activator

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// maxArrivalSkew bounds how far a forwarded arrival second may be from the
// receiver's clock: a forward takes at most --activator-forward-timeout.
const maxArrivalSkew = time.Minute

// PeerService serves ActivatorStatService: stats other replicas received
// for targets this one owns. Requests arrive validated by the server's
// interceptor chain.
type PeerService struct {
	collectorv1.UnimplementedActivatorStatServiceServer
	owners  Owners
	local   Recorder
	metrics *Metrics
	now     func() time.Time
}

var _ collectorv1.ActivatorStatServiceServer = (*PeerService)(nil)

// NewPeerService returns the service; owners nil means this replica owns
// every target.
func NewPeerService(owners Owners, local Recorder, m *Metrics, now func() time.Time) *PeerService {
	return &PeerService{owners: owners, local: local, metrics: m, now: now}
}

// ForwardActivatorStats implements ActivatorStatServiceServer.
func (p *PeerService) ForwardActivatorStats(ctx context.Context, req *collectorv1.ForwardActivatorStatsRequest) (*collectorv1.ForwardActivatorStatsResponse, error) {
	at := req.GetArrivalTime().AsTime()
	if d := p.now().Sub(at); d > maxArrivalSkew || d < -maxArrivalSkew {
		return nil, status.Error(codes.InvalidArgument, commonv1.Invalid("arrival_time", at.UTC().Format(time.RFC3339), "within a minute of the receiver's clock").Error())
	}
	resp := &collectorv1.ForwardActivatorStatsResponse{}
	refs := make([]*commonv1.TargetRef, 0, len(req.GetStats()))
	stats := make([]Stat, 0, len(req.GetStats()))
	for _, s := range req.GetStats() {
		if p.owners != nil {
			if _, mine := p.owners(s.GetTarget()); !mine {
				resp.NotOwned++
				continue
			}
		}
		refs = append(refs, s.GetTarget())
		stats = append(stats, Stat{
			Namespace: s.GetTarget().GetNamespace(), PodName: s.GetPodName(),
			AverageConcurrency: s.GetAverageConcurrency(), AverageProxiedConcurrency: s.GetAverageProxiedConcurrency(),
			RequestCount: s.GetRequestCount(), ProxiedRequestCount: s.GetProxiedRequestCount(),
		})
	}
	p.metrics.count(outcomeNotOwner, int(resp.NotOwned))
	if len(stats) == 0 {
		return resp, nil
	}
	c := p.local.Record(ctx, at.Truncate(time.Second), refs, stats)
	p.metrics.record(c)
	if c.Backlog > 0 {
		return nil, status.Error(codes.Unavailable, "collector busy: a decider's backlog is full; stats dropped")
	}
	resp.Recorded = int32(c.Recorded)
	resp.Unknown = int32(c.Unknown + c.TargetLimit)
	return resp, nil
}
