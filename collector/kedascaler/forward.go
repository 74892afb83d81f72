package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Owners names the collector replica that measures a target (the holder of
// its bucket's Lease) and whether it is this one. owner is "" while no
// replica holds the bucket.
type Owners interface {
	Owner(ref *commonv1.TargetRef) (owner string, mine bool)
}

// Peers calls other collector replicas.
type Peers interface {
	// EnsureKEDATarget calls the replica at addr.
	EnsureKEDATarget(ctx context.Context, addr string, req *collectorv1.EnsureKEDATargetRequest) (*collectorv1.EnsureKEDATargetResponse, error)
}

// maxPeers bounds the connections a PeerPool keeps: collector replicas are
// few, and their addresses come from the bucket Leases, not from callers.
const maxPeers = 64

// PeerPool is Peers over one lazily dialled connection per replica.
type PeerPool struct {
	dial func(addr string) (*grpc.ClientConn, error)

	// mu guards conns and closed.
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewPeerPool returns a PeerPool; dial makes a connection (with the
// collector's client certificate, pinning the collectors' identity).
func NewPeerPool(dial func(addr string) (*grpc.ClientConn, error)) *PeerPool {
	return &PeerPool{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

func (p *PeerPool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("the collector is stopping")
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	if len(p.conns) >= maxPeers {
		// Replicas that left keep their entries until then: close one.
		for a, c := range p.conns {
			_ = c.Close()
			delete(p.conns, a)
			break
		}
	}
	c, err := p.dial(addr)
	if err != nil {
		return nil, fmt.Errorf("collector %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// EnsureKEDATarget implements Peers.
func (p *PeerPool) EnsureKEDATarget(ctx context.Context, addr string, req *collectorv1.EnsureKEDATargetRequest) (*collectorv1.EnsureKEDATargetResponse, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return collectorv1.NewKEDATargetServiceClient(c).EnsureKEDATarget(ctx, req)
}

// Conn returns the connection to the replica at addr, dialled once and
// shared, for other collector-to-collector calls (ActivatorStatService).
func (p *PeerPool) Conn(addr string) (grpc.ClientConnInterface, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes every connection; the pool dials no more.
func (p *PeerPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for a, c := range p.conns {
		_ = c.Close()
		delete(p.conns, a)
	}
}

// Inline is what the server needs to serve inline Kafka triggers: the
// triggers this replica measures, who measures the others, and a way to
// reach them. With Triggers nil inline Kafka is not served (UNIMPLEMENTED);
// with Owners nil this replica measures every trigger.
type Inline struct {
	Triggers *Triggers
	Owners   Owners
	Peers    Peers
}

// serve answers call for trigger k of the ScaledObject namespace/name here
// when this replica measures it, else at the replica that does.
func (in *Inline) serve(ctx context.Context, namespace, name string, md map[string]string, k *Kafka, call Call) (*commonv1.TargetRef, *Poll, error) {
	ref := k.Target(namespace, name)
	owner, mine := "", true
	if in.Owners != nil {
		owner, mine = in.Owners.Owner(ref)
	}
	if mine {
		ref, p, err := in.Triggers.Serve(ctx, namespace, name, k, call)
		if err != nil {
			return nil, nil, inlineStatus(ref, err)
		}
		return ref, p, nil
	}
	if owner == "" || in.Peers == nil {
		return nil, nil, status.Errorf(codes.Unavailable, "target %s: no collector replica holds its bucket yet; retry", ref.Key())
	}
	resp, err := in.Peers.EnsureKEDATarget(ctx, owner, &collectorv1.EnsureKEDATargetRequest{
		Namespace: namespace, Name: name, ScalerMetadata: md, Call: callProtos[call],
	})
	if err != nil {
		// The owner's answer, with its code: a bad trigger is refused the
		// same there, a failed read is UNAVAILABLE there too. A bucket
		// that moved meanwhile is as passing as a replica out of reach.
		st := status.Convert(err)
		code := st.Code()
		if code == codes.FailedPrecondition {
			code = codes.Unavailable
		}
		return nil, nil, status.Errorf(code, "collector %s: %s", owner, commonv1.Printable(commonv1.Truncate(st.Message(), 512)))
	}
	rp := resp.GetPoll()
	if rp == nil {
		if k.KEDAMode() && call != CallEnsure {
			return nil, nil, status.Errorf(codes.Unavailable, "collector %s answered for target %s without a poll", owner, ref.Key())
		}
		return ref, nil, nil
	}
	return ref, &Poll{Time: rp.GetPollTime().AsTime(), Metric: rp.GetMetric(), Active: rp.GetActive()}, nil
}

// inlineStatus is the status KEDA gets for an error of Triggers.
func inlineStatus(ref *commonv1.TargetRef, err error) error {
	what := "inline Kafka target"
	if ref != nil {
		what += " " + ref.Key()
	}
	msg := commonv1.Printable(commonv1.Truncate(err.Error(), 1024))
	switch {
	case errors.Is(err, ErrTooManyTargets):
		return status.Errorf(codes.ResourceExhausted, "%s: %s", what, msg)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %s", what, msg)
	}
	// A failed read is never zero lag: KEDA keeps its replicas and counts
	// the failure toward its fallback.
	return status.Errorf(codes.Unavailable, "%s: %s", what, msg)
}

// callProtos are the Calls' wire values.
var callProtos = map[Call]collectorv1.KEDACall{
	CallEnsure: collectorv1.KEDACall_KEDA_CALL_ENSURE, CallGetMetrics: collectorv1.KEDACall_KEDA_CALL_GET_METRICS,
	CallIsActive: collectorv1.KEDACall_KEDA_CALL_IS_ACTIVE, CallActivity: collectorv1.KEDACall_KEDA_CALL_ACTIVITY,
}

// callOf is the Call of a wire value; any other is CallEnsure.
func callOf(c collectorv1.KEDACall) Call {
	for call, p := range callProtos {
		if p == c {
			return call
		}
	}
	return CallEnsure
}

// TargetService serves KEDATargetService: the calls other collector
// replicas forward for the inline triggers this one measures.
type TargetService struct {
	collectorv1.UnimplementedKEDATargetServiceServer
	inline *Inline
}

var _ collectorv1.KEDATargetServiceServer = (*TargetService)(nil)

// NewTargetService returns the service for in's triggers.
func NewTargetService(in *Inline) *TargetService { return &TargetService{inline: in} }

// EnsureKEDATarget reads the trigger again, as if KEDA had called, and
// answers it here: a replica that does not own the target refuses it
// (FAILED_PRECONDITION naming the owner) rather than forward again.
func (s *TargetService) EnsureKEDATarget(ctx context.Context, req *collectorv1.EnsureKEDATargetRequest) (*collectorv1.EnsureKEDATargetResponse, error) {
	if s.inline.Triggers == nil {
		return nil, status.Error(codes.Unimplemented, "this collector does not serve inline Kafka")
	}
	trig, err := Parse(req.GetNamespace(), req.GetScalerMetadata())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if trig.Kafka == nil {
		return nil, status.Error(codes.InvalidArgument, commonv1.Invalid("scaler_metadata", "", "an inline Kafka trigger ("+KeyBootstrapServers+")").Error())
	}
	k := trig.Kafka
	// Any collector replica shares the policy: a forward is checked as
	// KEDA's own call was.
	if err := refusedBrokers(s.inline.Triggers.cfg.Brokers, k); err != nil {
		return nil, err
	}
	if s.inline.Owners != nil {
		if owner, mine := s.inline.Owners.Owner(k.Target(req.GetNamespace(), req.GetName())); !mine {
			return nil, status.Errorf(codes.FailedPrecondition, "target %s: owned by collector %q, not this one; retry", k.Target(req.GetNamespace(), req.GetName()).Key(), owner)
		}
	}
	ref, p, err := s.inline.Triggers.Serve(ctx, req.GetNamespace(), req.GetName(), k, callOf(req.GetCall()))
	if err != nil {
		return nil, inlineStatus(ref, err)
	}
	resp := &collectorv1.EnsureKEDATargetResponse{Target: ref}
	if p != nil {
		resp.Poll = &collectorv1.KEDAPoll{PollTime: timestamppb.New(p.Time), Metric: p.Metric, Active: p.Active}
	}
	return resp, nil
}
