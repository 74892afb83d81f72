package dispatch

import (
	"google.golang.org/grpc"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/shard/route"
)

// DeciderOf returns the decider that owns ref among the current deciders
// (shadows aside), whether or not this hub holds ref: every collector
// replica routes a target alike. false when no decider is known.
func (h *Hub) DeciderOf(ref *commonv1.TargetRef) (string, bool) {
	key := keyOf(ref).String()
	h.mu.Lock()
	defer h.mu.Unlock()
	return route.Owner(key, h.members)
}

// Conn returns the connection this collector streams to the decider at
// addr over, for other calls to that decider; false when addr is not a
// decider it streams to. The connection closes when the decider leaves the
// endpoints, which fails the calls still on it.
func (s *Streams) Conn(addr string) (*grpc.ClientConn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd, ok := s.senders[addr]
	if !ok {
		return nil, false
	}
	return sd.conn, true
}
