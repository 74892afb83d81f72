// Package logkey spells tidal's structured log fields once, so
// target, pod and reason read the same in every line, and limits how often
// one key may log.
package logkey

import (
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Target is the target key field, namespace/name.
func Target(key string) zap.Field { return zap.String("target", key) }

// Pod is the pod name field.
func Pod(name string) zap.Field { return zap.String("pod", name) }

// Reason is a failure reason field.
func Reason(r string) zap.Field { return zap.String("reason", r) }

// Decider is a decider endpoint field.
func Decider(addr string) zap.Field { return zap.String("decider", addr) }

// Bucket is a bucket number field.
func Bucket(b int) zap.Field { return zap.Int("bucket", b) }

// Limiter allows one log line per key per period: a pod that fails every
// second is logged once a minute, and counted by its metric every time.
type Limiter struct {
	period time.Duration

	// mu guards last and swept.
	mu    sync.Mutex
	last  map[string]time.Time
	swept time.Time
}

// NewLimiter returns a Limiter allowing one line per key per period.
func NewLimiter(period time.Duration) *Limiter {
	return &Limiter{period: period, last: map[string]time.Time{}}
}

// Allow reports whether key may log at now, and if so starts its period.
func (l *Limiter) Allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > l.period {
		// Forget keys quiet for a period, so the map tracks only noisy ones.
		maps.DeleteFunc(l.last, func(_ string, t time.Time) bool { return now.Sub(t) >= l.period })
		l.swept = now
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < l.period {
		return false
	}
	l.last[key] = now
	return true
}
