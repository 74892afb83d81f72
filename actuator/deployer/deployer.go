package deployer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/tidalscale/tidal/actuator/scale"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
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

// current returns the Deployment's replicas and resourceVersion; existed is
// false when there is none.
func (d *Deployer) current(ctx context.Context, f *Function) (replicas int32, rv string, existed bool, err error) {
	dep, err := d.client.AppsV1().Deployments(f.Namespace).Get(ctx, f.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("get deployment %s: %w", f, err)
	}
	return ptr.Deref(dep.Spec.Replicas, 1), dep.ResourceVersion, true, nil
}

// Deploy creates f's Deployment at zero replicas (scaling from zero is the
// autoscaler's decision), or re-applies it keeping its replicas if it exists.
// It returns the Deployment's name and whether it was created.
func (d *Deployer) Deploy(ctx context.Context, f *Function) (string, bool, error) {
	if err := f.Validate(); err != nil {
		return "", false, err
	}
	created := false
	err := d.applyKeeping(ctx, f, func(cur int32, existed bool) (int32, error) {
		created = !existed
		return cur, nil // 0 when it did not exist
	})
	if err != nil {
		return "", false, err
	}
	return f.Name, created, nil
}

// Update re-applies f's Deployment from its spec; replicas nil keeps the
// current count. Unlike riff's unconditional PUT, server-side apply leaves
// fields other managers own (an HPA's, a user's annotations) alone.
func (d *Deployer) Update(ctx context.Context, f *Function, replicas *int32) (int32, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	var n int32
	err := d.applyKeeping(ctx, f, func(cur int32, existed bool) (int32, error) {
		if !existed {
			return 0, fmt.Errorf("deployment of function %s: %w", f, scale.ErrNotFound)
		}
		n = cur
		if replicas != nil {
			n = *replicas
		}
		return n, nil
	})
	return n, err
}

// applyKeeping applies f's Deployment with the replicas pick returns for the
// current ones. An existing Deployment is applied with the resourceVersion
// read, so a scale that lands in between makes it read and apply again
// rather than undo the scale.
func (d *Deployer) applyKeeping(ctx context.Context, f *Function, pick func(cur int32, existed bool) (int32, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, rv, existed, err := d.current(ctx, f)
		if err != nil {
			return err
		}
		replicas, err := pick(cur, existed)
		if err != nil {
			return err
		}
		ac, err := Deployment(f, d.cfg.SidecarImage, replicas)
		if err != nil {
			return err
		}
		hash, err := d.SpecHash(f)
		if err != nil {
			return err
		}
		ac.WithAnnotations(map[string]string{AnnotationSpecHash: hash})
		if existed {
			ac.WithResourceVersion(rv)
		}
		_, err = d.client.AppsV1().Deployments(f.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: scale.FieldManager, Force: true})
		if apierrors.IsConflict(err) {
			return err
		}
		if err != nil {
			return fmt.Errorf("apply deployment %s: %w", f, err)
		}
		return nil
	})
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
// maxReplicas and its input topic's partitions. A nil
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

// AnnotationSpecHash on a function's Deployment identifies what it was last
// applied from, so the controller re-applies only when that changes.
const AnnotationSpecHash = "functions.tidal.dev/spec-hash"

// SpecHash identifies the Deployment the Deployer would apply for f (at a
// fixed replica count): the function's spec, the brokers and the sidecar
// image.
func (d *Deployer) SpecHash(f *Function) (string, error) {
	ac, err := Deployment(f, d.cfg.SidecarImage, 0)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(ac)
	if err != nil {
		return "", fmt.Errorf("function %s: %w", f, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}
