package deployer

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	functionsv1alpha1 "github.com/tidalscale/tidal/actuator/apis/functions/v1alpha1"
	"github.com/tidalscale/tidal/actuator/scale"
)

// ErrOverCap is returned by Scale for a replica count above the function's
// cap (its maxReplicas, or its input topic's partition count).
var ErrOverCap = errors.New("replicas above the function's cap")

// Config configures a Deployer.
type Config struct {
	// SidecarImage is the image of the sidecar container.
	SidecarImage string
	// Brokers are the Kafka bootstrap servers functions use by default.
	Brokers []string
}

// replicaScaler writes a Deployment's replicas through its scale subresource.
type replicaScaler interface {
	SetReplicas(ctx context.Context, t scale.Target, replicas int32) error
}

// Deployer creates, updates, scales and deletes functions' Deployments.
type Deployer struct {
	cfg    Config
	client kubernetes.Interface
	scaler replicaScaler
}

// New returns a Deployer writing with client and scaling through scaler.
func New(cfg Config, client kubernetes.Interface, scaler replicaScaler) *Deployer {
	return &Deployer{cfg: cfg, client: client, scaler: scaler}
}

// Brokers returns the default Kafka bootstrap servers.
func (d *Deployer) Brokers() []string { return d.cfg.Brokers }

// currentReplicas returns the Deployment's replicas, or def when it does not
// exist yet.
func (d *Deployer) currentReplicas(ctx context.Context, f *Function, def int32) (int32, bool, error) {
	dep, err := d.client.AppsV1().Deployments(f.Namespace).Get(ctx, f.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return def, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("get deployment %s: %w", f, err)
	}
	if dep.Spec.Replicas == nil {
		return 1, true, nil
	}
	return *dep.Spec.Replicas, true, nil
}

// Deploy creates f's Deployment at zero replicas (scaling from zero is the
// autoscaler's decision), or re-applies it keeping its replicas if it exists.
// It returns the Deployment's name and whether it was created.
func (d *Deployer) Deploy(ctx context.Context, f *Function) (string, bool, error) {
	if err := f.Validate(); err != nil {
		return "", false, err
	}
	replicas, existed, err := d.currentReplicas(ctx, f, 0)
	if err != nil {
		return "", false, err
	}
	if err := d.apply(ctx, f, replicas); err != nil {
		return "", false, err
	}
	return f.Name, !existed, nil
}

// Update re-applies f's Deployment from its spec; replicas nil keeps the
// current count. Unlike riff's unconditional PUT, server-side apply leaves
// fields other managers own (an HPA's, a user's annotations) alone.
func (d *Deployer) Update(ctx context.Context, f *Function, replicas *int32) (int32, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	cur, existed, err := d.currentReplicas(ctx, f, 0)
	if err != nil {
		return 0, err
	}
	if !existed {
		return 0, fmt.Errorf("deployment of function %s: %w", f, scale.ErrNotFound)
	}
	if replicas != nil {
		cur = *replicas
	}
	if err := d.apply(ctx, f, cur); err != nil {
		return 0, err
	}
	return cur, nil
}

func (d *Deployer) apply(ctx context.Context, f *Function, replicas int32) error {
	ac, err := Deployment(f, d.cfg.SidecarImage, replicas)
	if err != nil {
		return err
	}
	_, err = d.client.AppsV1().Deployments(f.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: scale.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply deployment %s: %w", f, err)
	}
	return nil
}

// Undeploy deletes the function's Deployment with foreground propagation,
// so its pods are gone before the Deployment is. It reports whether a
// Deployment existed.
func (d *Deployer) Undeploy(ctx context.Context, namespace, name string) (bool, error) {
	fg := metav1.DeletePropagationForeground
	err := d.client.AppsV1().Deployments(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete deployment %s/%s: %w", namespace, name, err)
	}
	return true, nil
}

// Cap returns the most replicas a function can use: the smaller of its
// maxReplicas and its input topic's partitions (spec/riff.md §1.1). A nil
// topic (not found) counts as riff's default of one partition.
func Cap(fn *functionsv1alpha1.Function, topic *functionsv1alpha1.Topic) int32 {
	partitions := int32(1)
	if topic != nil && topic.Spec.Partitions != nil {
		partitions = *topic.Spec.Partitions
	}
	if m := fn.Spec.MaxReplicas; m != nil && *m < partitions {
		return *m
	}
	return partitions
}

// Scale sets the function's Deployment to replicas, refusing a count above
// limit (see Cap). Unlike riff's, it retries on conflict and reports a
// missing Deployment as scale.ErrNotFound.
func (d *Deployer) Scale(ctx context.Context, namespace, name string, replicas, limit int32) error {
	if replicas < 0 || replicas > limit {
		return fmt.Errorf("function %s/%s: replicas %d: want 0 to %d: %w", namespace, name, replicas, limit, ErrOverCap)
	}
	return d.scaler.SetReplicas(ctx, scale.Target{Namespace: namespace, Name: name, APIVersion: "apps/v1", Kind: "Deployment"}, replicas)
}
