// Package controller is the skeleton the actuator's controllers share, in
// sample-controller's shape: event handlers that only enqueue names, a
// rate-limited workqueue (one worker per name at a time), workers started
// once the caches sync, the Done/Forget discipline with backoff on errors
// and requeues on request, and the ownership of names among replicas.
package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Config configures a Controller.
type Config struct {
	// Name names the queue and the objects in logs ("podautoscaler").
	Name string
	// Workers is the number of reconcile workers.
	Workers int
	// RetryQPS and RetryBurst bound the retries of failed reconciles
	// across all names, on top of each name's exponential backoff.
	RetryQPS   rate.Limit
	RetryBurst int
	// Clock drives the queue's delays; nil means the real clock.
	Clock clock.WithTicker
}

// Reconcile converges one object; requeue > 0 asks to run again after it.
// An error retries with backoff.
type Reconcile func(ctx context.Context, name cache.ObjectName) (requeue time.Duration, err error)

// Controller runs a Reconcile over a workqueue of object names.
type Controller struct {
	cfg       Config
	log       *zap.Logger
	reconcile Reconcile
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[cache.ObjectName]

	// Ownership says which names this replica reconciles when replicas
	// share them; the reconcile checks it.
	Ownership
}

// New returns a Controller; nothing runs before Run.
func New(cfg Config, log *zap.Logger, reconcile Reconcile, synced ...cache.InformerSynced) *Controller {
	return &Controller{
		cfg:       cfg,
		log:       log,
		reconcile: reconcile,
		synced:    synced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(cfg.RetryQPS, cfg.RetryBurst)},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: cfg.Name, Clock: cfg.Clock}),
	}
}

// Add queues name now.
func (c *Controller) Add(name cache.ObjectName) { c.queue.Add(name) }

// AddAfter queues name after d; names waiting are merged.
func (c *Controller) AddAfter(name cache.ObjectName, d time.Duration) { c.queue.AddAfter(name, d) }

// Enqueue queues an informer object (or tombstone) by its own name.
func (c *Controller) Enqueue(obj any) {
	name, err := Key(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(name)
}

// EnqueueOwner returns a handler that queues the name of an object's
// controller of kind gvk, and ignores other objects.
func (c *Controller) EnqueueOwner(gvk schema.GroupVersionKind) func(obj any) {
	return func(obj any) {
		if name, ok := Owner(obj, gvk); ok {
			c.queue.Add(name)
		}
	}
}

// Handler calls enqueue on every add, delete and update that changed the
// object (resyncs with an unchanged resourceVersion are dropped); skip,
// when set, drops the updates it returns true for.
func Handler(enqueue func(any), skip func(old, cur metav1.Object) bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			o, n := old.(metav1.Object), cur.(metav1.Object)
			if o.GetResourceVersion() == n.GetResourceVersion() || (skip != nil && skip(o, n)) {
				return
			}
			enqueue(cur)
		},
		DeleteFunc: enqueue,
	}
}

// Resync queues every name in store this replica owns, after a change of
// ownership.
func (c *Controller) Resync(store cache.Store) { c.Owned(store, c.queue.Add) }

// HasSynced reports whether the informers have synced.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run waits for the caches, runs the workers until ctx ends, then shuts the
// queue down and waits for them.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("%s controller: caches did not sync", c.cfg.Name)
	}
	var wg sync.WaitGroup
	for range max(c.cfg.Workers, 1) {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.next(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// next reconciles one name; false means the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	// A shut-down queue still hands out what it holds, each reconcile with a
	// status write that outlives ctx (scale.Finishing): leave the rest to
	// whoever runs next, which reconciles from scratch.
	if ctx.Err() != nil {
		return false
	}
	requeue, err := c.reconcile(ctx, name)
	if err != nil {
		c.log.Info("reconcile failed; retrying", zap.String(c.cfg.Name, name.String()), zap.Error(err))
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	if requeue > 0 {
		c.queue.AddAfter(name, requeue)
	}
	return true
}
