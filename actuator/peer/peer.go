// Package peer forwards a Scale call to the actuator replica that owns its
// PodAutoscaler, when replicas share PodAutoscalers by bucket: one
// connection per peer, and never a second hop, so ownership in motion
// cannot loop a call.
package peer

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
)

// forwardedKey marks a Scale call one actuator replica forwarded to
// another; a replica that does not own the target either refuses it
// instead of forwarding again, so ownership in motion never loops.
const forwardedKey = "x-tidal-forwarded"

// maxPeers bounds the connections kept to other replicas; peers come from
// bucket Leases, so there are about as many as replicas.
const maxPeers = 64

// Forwarder sends Scale calls to the replica that owns their
// PodAutoscaler, over one connection per peer.
type Forwarder struct {
	dial grpc.DialOption

	// mu guards peers.
	mu    sync.Mutex
	peers map[string]*grpc.ClientConn
}

// New returns a Forwarder dialing peers with dial.
func New(dial grpc.DialOption) *Forwarder {
	return &Forwarder{dial: dial, peers: map[string]*grpc.ClientConn{}}
}

func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.peers[addr]; ok {
		return c, nil
	}
	if len(f.peers) >= maxPeers {
		// Replicas came and went: start over with the ones still asked for.
		f.closeLocked()
	}
	c, err := grpc.NewClient(addr, f.dial)
	if err != nil {
		return nil, fmt.Errorf("actuator peer %s: %w", addr, err)
	}
	f.peers[addr] = c
	return c, nil
}

// Scale forwards req to the actuator at addr. A call that was itself
// forwarded here is refused as Unavailable instead.
func (f *Forwarder) Scale(ctx context.Context, addr string, req *actuatorv1.ScaleRequest) (*actuatorv1.ScaleResponse, error) {
	if forwarded(ctx) {
		return nil, status.Errorf(codes.Unavailable, "target %s: forwarded here, but actuator %s owns it: ownership is moving, retry", req.GetTarget().Key(), addr)
	}
	c, err := f.conn(addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	return actuatorv1.NewActuatorServiceClient(c).Scale(ctx, req)
}

// Close closes the connections to every peer.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLocked()
}

func (f *Forwarder) closeLocked() {
	for addr, c := range f.peers {
		_ = c.Close()
		delete(f.peers, addr)
	}
}
