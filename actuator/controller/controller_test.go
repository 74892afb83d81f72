package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/cache"
)

// TestRunStopsWithAFullQueue: once ctx ends, the workers finish the
// reconciles they are in and take no more, however many names are queued
// (a shut-down workqueue still hands them out).
func TestRunStopsWithAFullQueue(t *testing.T) {
	const workers, queued = 4, 1000
	var calls atomic.Int64
	started := make(chan struct{}, queued)
	release := make(chan struct{})
	reconcile := func(ctx context.Context, _ cache.ObjectName) (time.Duration, error) {
		calls.Add(1)
		started <- struct{}{}
		<-release
		return 0, nil
	}
	c := New(Config{Name: "test", Workers: workers, RetryQPS: 10, RetryBurst: 100}, zap.NewNop(), reconcile)
	for i := range queued {
		c.Add(cache.ObjectName{Namespace: "ns", Name: fmt.Sprint(i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for range workers {
		<-started
	}
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := calls.Load(); n != workers {
		t.Errorf("%d reconciles ran; want the %d in flight when the context ended", n, workers)
	}
}
