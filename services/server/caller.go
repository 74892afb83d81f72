package server

import (
	"context"
	"net"

	"google.golang.org/grpc/peer"
)

type callerKey struct{}

// withCaller records the caller's authenticated identity for handlers.
func withCaller(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// Caller names whoever makes a call, for bounds kept per caller: its
// authenticated identity (the SPIFFE ID of its certificate) under mutual TLS,
// else the host it calls from. Empty when neither is known.
func Caller(ctx context.Context) string {
	if id, ok := ctx.Value(callerKey{}).(string); ok && id != "" {
		return id
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}
