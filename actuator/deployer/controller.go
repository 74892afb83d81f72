package deployer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/listers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	functionsv1alpha1 "github.com/tidalscale/tidal/actuator/apis/functions/v1alpha1"
	"github.com/tidalscale/tidal/actuator/crdclient"
	"github.com/tidalscale/tidal/actuator/scale"
)

// Event reasons of the Function controller.
const (
	EventDeployed        = "Deployed"
	EventInvalidFunction = "InvalidFunction"
)

// Controller deploys every Function and keeps its status: it applies the
// Function's Deployment whenever the Function changes (deleting a Function
// deletes the Deployment through its owner reference) and mirrors the
// Deployment's replicas into the Function's status.
type Controller struct {
	deployer    *Deployer
	log         *zap.Logger
	tidal       *crdclient.Clientset
	functions   crdclient.FunctionLister
	topics      crdclient.TopicLister
	deployments appslisters.DeploymentLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder    record.EventRecorder
	workers     int
}

// NewController returns a Function controller; the caller starts the
// informers and then Run.
func NewController(d *Deployer, log *zap.Logger, tidal *crdclient.Clientset, tidalInformers *crdclient.Informers,
	kubeInformers informers.SharedInformerFactory, recorder record.EventRecorder, workers int,
) (*Controller, error) {
	deps := kubeInformers.Apps().V1().Deployments()
	c := &Controller{
		deployer:    d,
		log:         log,
		tidal:       tidal,
		functions:   crdclient.NewFunctionLister(tidalInformers.Functions),
		topics:      crdclient.NewTopicLister(tidalInformers.Topics),
		deployments: deps.Lister(),
		synced:      []cache.InformerSynced{tidalInformers.Functions.HasSynced, tidalInformers.Topics.HasSynced, deps.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(20), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "functions"}),
		recorder: recorder,
		workers:  max(workers, 1),
	}
	if _, err := tidalInformers.Functions.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				c.enqueue(cur)
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := deps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueOwner,
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				c.enqueueOwner(cur)
			}
		},
		DeleteFunc: c.enqueueOwner,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	name, err := cache.ObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(name)
}

func (c *Controller) enqueueOwner(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == "Function" &&
		ref.APIVersion == functionsv1alpha1.SchemeGroupVersion.String() {
		c.queue.Add(cache.ObjectName{Namespace: m.GetNamespace(), Name: ref.Name})
	}
}

// HasSynced reports whether the informers have synced.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run waits for the caches and runs the workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("function controller: caches did not sync")
	}
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.processNext(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.sync(ctx, name); err != nil {
		c.log.Info("function reconcile failed; retrying", zap.String("function", name.String()), zap.Error(err))
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

func (c *Controller) sync(ctx context.Context, name cache.ObjectName) error {
	fn, err := listers.NewNamespaced(c.functions, name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		return nil // its Deployment goes with it through the owner reference
	}
	if err != nil {
		return err
	}
	fn = fn.DeepCopy()
	st := fn.Status.DeepCopy()
	st.ObservedGeneration = fn.Generation
	f := FromObject(fn, c.deployer.Brokers())
	ready := metav1.Condition{Type: functionsv1alpha1.FunctionConditionReady, Status: metav1.ConditionTrue,
		Reason: "Deployed", ObservedGeneration: fn.Generation}
	if err := f.Validate(); err != nil {
		// Nothing is written until the user fixes the Function, which
		// triggers a reconcile.
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidSpec", err.Error()
		c.recorder.Event(fn, corev1.EventTypeWarning, EventInvalidFunction, err.Error())
	} else {
		_, created, err := c.deployer.Deploy(ctx, &f)
		var fe *FieldError
		switch {
		case errors.As(err, &fe):
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidSpec", err.Error()
		case err != nil:
			return err
		case created:
			c.recorder.Eventf(fn, corev1.EventTypeNormal, EventDeployed, "deployment %s created with 0 replicas", fn.Name)
		}
		st.DeploymentName = fn.Name
		if dep, err := c.deployments.Deployments(fn.Namespace).Get(fn.Name); err == nil {
			st.Replicas, st.ReadyReplicas = deploymentReplicas(dep), dep.Status.ReadyReplicas
		}
		if _, err := listers.NewNamespaced(c.topics, fn.Namespace).Get(fn.Spec.Input); apierrors.IsNotFound(err) && ready.Status == metav1.ConditionTrue {
			ready.Status, ready.Reason = metav1.ConditionFalse, "TopicNotFound"
			ready.Message = fmt.Sprintf("function %s/%s: spec.input: topic %q not found; the partition cap is unknown", fn.Namespace, fn.Name, fn.Spec.Input)
		}
	}
	setCondition(&st.Conditions, ready)
	if equality.Semantic.DeepEqual(&fn.Status, st) {
		return nil
	}
	fn.Status = *st
	if _, err := c.tidal.Functions(fn.Namespace).UpdateStatus(ctx, fn, metav1.UpdateOptions{FieldManager: scale.FieldManager}); err != nil {
		return fmt.Errorf("update status of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return nil
}

func deploymentReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// Cap returns the replica cap of the Function namespace/name (Cap), and
// false when no such Function exists.
func (c *Controller) Cap(namespace, name string) (int32, bool) {
	fn, err := listers.NewNamespaced(c.functions, namespace).Get(name)
	if err != nil {
		return 0, false
	}
	topic, err := listers.NewNamespaced(c.topics, namespace).Get(fn.Spec.Input)
	if err != nil {
		topic = nil
	}
	return Cap(fn, topic), true
}

func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
		}
		*old = c
		return
	}
	c.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	*conds = append(*conds, c)
}
