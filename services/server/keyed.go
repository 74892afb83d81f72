package server

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// KeyedLimiter is a token bucket per key, for the bounds a service keeps
// per caller and namespace beyond its interceptors' (the actuator's live
// reads). At most maxKeys buckets are held; beyond, the least recently used
// is forgotten (its next call starts full), so a caller naming ever more
// keys grows nothing.
type KeyedLimiter struct{ l *rateLimiter }

// NewKeyedLimiter returns a limiter of r calls a second per key, burst at
// once.
func NewKeyedLimiter(r float64, burst, maxKeys int) *KeyedLimiter {
	return &KeyedLimiter{l: newRateLimiter(rate.Limit(r), burst, maxKeys)}
}

// Allow takes one token of key's bucket, if it has one.
func (k *KeyedLimiter) Allow(key string) bool { return k.l.allow(key, time.Now()) }

// Rate is each key's rate, calls a second.
func (k *KeyedLimiter) Rate() float64 { return float64(k.l.rate) }

// CallerKey keys a bound per caller and namespace: Caller(ctx), then ns.
func CallerKey(ctx context.Context, ns string) string { return Caller(ctx) + "\x00" + ns }
