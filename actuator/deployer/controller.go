package deployer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	tidalinformers "github.com/tidalscale/tidal/apis/generated/informers/externalversions"
	functionslisters "github.com/tidalscale/tidal/apis/generated/listers/functions/v1alpha1"
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
	tidal       tidalclient.Interface
	functions   functionslisters.FunctionLister
	topics      functionslisters.TopicLister
	deployments appslisters.DeploymentLister
	recorder    record.EventRecorder
	fnStore     cache.Store
	clock       clock.PassiveClock
	// Controller is the workqueue and its workers (Run, HasSynced), and
	// which Functions this replica deploys when actuator replicas share
	// them (a Function's bucket is its PodAutoscaler's).
	*controller.Controller
}

// SetOwnership shares the Functions among actuator replicas. Call Resync
// when this replica gains or loses Functions.
func (c *Controller) SetOwnership(owner controller.OwnerFunc) { c.Set(owner) }

// Resync queues every Function this replica owns.
func (c *Controller) Resync() { c.Controller.Resync(c.fnStore) }

// NewController returns a Function controller; the caller starts the
// informers and then Run.
func NewController(d *Deployer, log *zap.Logger, tidal tidalclient.Interface, tidalInformers tidalinformers.SharedInformerFactory,
	kubeInformers informers.SharedInformerFactory, recorder record.EventRecorder, workers int,
) (*Controller, error) {
	deps := kubeInformers.Apps().V1().Deployments()
	fns := tidalInformers.Functions().V1alpha1().Functions()
	topics := tidalInformers.Functions().V1alpha1().Topics()
	c := &Controller{
		clock:       clock.RealClock{},
		deployer:    d,
		log:         log,
		tidal:       tidal,
		functions:   fns.Lister(),
		fnStore:     fns.Informer().GetStore(),
		topics:      topics.Lister(),
		deployments: deps.Lister(),
		recorder:    recorder,
	}
	c.Controller = controller.New(controller.Config{Name: "function", Workers: workers, RetryQPS: 20, RetryBurst: 100}, log,
		func(ctx context.Context, name cache.ObjectName) (time.Duration, error) { return 0, c.sync(ctx, name) },
		fns.Informer().HasSynced, topics.Informer().HasSynced, deps.Informer().HasSynced)
	if _, err := fns.Informer().AddEventHandler(controller.Handler(c.Enqueue, nil)); err != nil {
		return nil, err
	}
	if _, err := deps.Informer().AddEventHandler(controller.Handler(
		c.EnqueueOwner(functionsv1alpha1.SchemeGroupVersion.WithKind("Function")), nil)); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) sync(ctx context.Context, name cache.ObjectName) error {
	if _, mine := c.Owns(name); !mine {
		return nil
	}
	fn, err := c.functions.Functions(name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		return c.undeployOrphans(ctx, name)
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
	} else if !c.upToDate(fn, &f) {
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
	}
	if ready.Status == metav1.ConditionTrue {
		st.DeploymentName = fn.Name
		if err := c.ensurePodAutoscaler(ctx, fn); err != nil {
			return err
		}
		if dep, err := c.deployments.Deployments(fn.Namespace).Get(fn.Name); err == nil {
			st.Replicas, st.ReadyReplicas = ptr.Deref(dep.Spec.Replicas, 1), dep.Status.ReadyReplicas
		}
		if _, err := c.topics.Topics(fn.Namespace).Get(fn.Spec.Input); apierrors.IsNotFound(err) {
			ready.Status, ready.Reason = metav1.ConditionFalse, "TopicNotFound"
			ready.Message = fmt.Sprintf("function %s/%s: spec.input: topic %q not found; the partition cap is unknown", fn.Namespace, fn.Name, fn.Spec.Input)
		}
	}
	// The transition time moves when the status does (Kubernetes'
	// convention); reason and message follow the latest reconcile.
	ready.LastTransitionTime = metav1.NewTime(c.clock.Now().Truncate(time.Second))
	meta.SetStatusCondition(&st.Conditions, ready)
	if equality.Semantic.DeepEqual(&fn.Status, st) {
		return nil
	}
	fn.Status = *st
	if _, err := c.tidal.FunctionsV1alpha1().Functions(fn.Namespace).UpdateStatus(ctx, fn, metav1.UpdateOptions{FieldManager: scale.FieldManager}); err != nil {
		return fmt.Errorf("update status of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return nil
}

// CheckScale refuses a desired scale above the cap of the Function whose
// Deployment t is (its maxReplicas and its input topic's partitions); a
// target that is no Function's Deployment passes.
func (c *Controller) CheckScale(t scale.Target, desired int32) error {
	if t.APIVersion != "" && t.APIVersion != "apps/v1" || t.Kind != "" && t.Kind != "Deployment" {
		return nil
	}
	if limit, ok := c.Cap(t.Namespace, t.Name); ok && desired > limit {
		return fmt.Errorf("desired_replicas %d for function %s: want 0 to %d (maxReplicas and input topic partitions): %w",
			desired, t, limit, ErrOverCap)
	}
	return nil
}

// Cap returns the replica cap of the Function namespace/name (Cap), and
// false when no such Function exists.
func (c *Controller) Cap(namespace, name string) (int32, bool) {
	fn, err := c.functions.Functions(namespace).Get(name)
	if err != nil {
		return 0, false
	}
	topic, err := c.topics.Topics(namespace).Get(fn.Spec.Input)
	if err != nil {
		topic = nil
	}
	return Cap(fn, topic), true
}

// podAutoscaler builds the lag PodAutoscaler that scales fn's Deployment on
// its input topic's consumer lag, with the Function's consumer group, mode,
// maxReplicas and idle timeout (riff's scaling of a
// Function); the decider caps it at the partition count.
func (c *Controller) podAutoscaler(fn *functionsv1alpha1.Function) *autoscalingv1alpha1.PodAutoscaler {
	mode := autoscalingv1alpha1.LagModeRiff
	if fn.Spec.LagMode == functionsv1alpha1.LagModeKEDA {
		mode = autoscalingv1alpha1.LagModeKEDA
	}
	lag := &autoscalingv1alpha1.LagSource{
		Brokers:       c.deployer.Brokers(),
		Topic:         fn.Spec.Input,
		ConsumerGroup: fn.Name,
		Mode:          mode,
	}
	if mode == autoscalingv1alpha1.LagModeRiff {
		lag.Riff = &autoscalingv1alpha1.RiffLagParameters{MaxReplicas: fn.Spec.MaxReplicas, IdleTimeout: fn.Spec.IdleTimeout}
	}
	return &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fn.Name,
			Namespace: fn.Namespace,
			Labels:    map[string]string{LabelFunction: fn.Name, LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(fn,
				functionsv1alpha1.SchemeGroupVersion.WithKind("Function"))},
		},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: fn.Name},
			Strategy:       autoscalingv1alpha1.StrategyLag,
			Lag:            lag,
		},
	}
}

// ensurePodAutoscaler creates fn's lag PodAutoscaler or brings its spec up
// to date; a PodAutoscaler of that name the Function does not control is
// left alone (the user scales the function their way).
func (c *Controller) ensurePodAutoscaler(ctx context.Context, fn *functionsv1alpha1.Function) error {
	want := c.podAutoscaler(fn)
	client := c.tidal.AutoscalingV1alpha1().PodAutoscalers(fn.Namespace)
	have, err := client.Get(ctx, fn.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: scale.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create podautoscaler of function %s/%s: %w", fn.Namespace, fn.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get podautoscaler of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	if !metav1.IsControlledBy(have, fn) {
		return nil
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return nil
	}
	have.Spec = want.Spec
	if _, err := client.Update(ctx, have, metav1.UpdateOptions{FieldManager: scale.FieldManager}); err != nil {
		return fmt.Errorf("update podautoscaler of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return nil
}

// undeployOrphans removes the Deployment and PodAutoscaler of a deleted
// Function, as riff's controller undeployed on delete, rather than waiting
// for the garbage collector, which may take its discovery period to act on
// a newly installed kind. Objects not controlled by a Function of that name
// are left alone.
func (c *Controller) undeployOrphans(ctx context.Context, fn cache.ObjectName) error {
	owned := func(m metav1.Object) bool {
		owner, ok := controller.Owner(m, functionsv1alpha1.SchemeGroupVersion.WithKind("Function"))
		return ok && owner == fn
	}
	if dep, err := c.deployments.Deployments(fn.Namespace).Get(fn.Name); err == nil && owned(dep) && dep.DeletionTimestamp == nil {
		if _, err := c.deployer.Undeploy(ctx, fn.Namespace, fn.Name); err != nil {
			return err
		}
	}
	pa, err := c.tidal.AutoscalingV1alpha1().PodAutoscalers(fn.Namespace).Get(ctx, fn.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get podautoscaler of function %s: %w", fn, err)
	}
	if !owned(pa) || pa.DeletionTimestamp != nil {
		return nil
	}
	uid := pa.UID
	err = c.tidal.AutoscalingV1alpha1().PodAutoscalers(fn.Namespace).Delete(ctx, fn.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete podautoscaler of function %s: %w", fn, err)
	}
	return nil
}

// upToDate reports whether fn's Deployment exists, is fn's, and was applied
// from what the Deployer would apply now; a scale or status change of the
// Deployment then needs no apply.
func (c *Controller) upToDate(fn *functionsv1alpha1.Function, f *Function) bool {
	dep, err := c.deployments.Deployments(fn.Namespace).Get(fn.Name)
	if err != nil || !metav1.IsControlledBy(dep, fn) {
		return false
	}
	hash, err := c.deployer.SpecHash(f)
	return err == nil && dep.Annotations[AnnotationSpecHash] == hash
}
