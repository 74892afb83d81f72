package system

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/workload"
)

// Dial is a Profile whose rate is set while it runs, so a scenario can move
// from phase to phase when its checks pass rather than on a fixed clock.
type Dial struct{ bits atomic.Uint64 }

// NewDial returns a Dial at rate.
func NewDial(rate float64) *Dial {
	d := &Dial{}
	d.Set(rate)
	return d
}

// Set changes the rate; negative or NaN means 0.
func (d *Dial) Set(rate float64) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = 0
	}
	d.bits.Store(math.Float64bits(rate))
}

// Rate implements workload.Profile.
func (d *Dial) Rate(time.Duration) float64 { return math.Float64frombits(d.bits.Load()) }

// Target is a scaled workload the System observes.
type Target interface {
	// Ref is the namespace and name of the Deployment it scales.
	Ref() (namespace, name string)
	// Load is the offered rate now: requests or records per second.
	Load() float64
	Stop()
}

// KPAOptions describe a KPA workload: a Deployment with a PodAutoscaler,
// served by simulated queue-proxies (package workload).
type KPAOptions struct {
	Namespace, Name string
	// Annotations of the PodAutoscaler (autoscaling.knative.dev/*).
	Annotations map[string]string
	// ContainerConcurrency of the PodAutoscaler; the model's own limit is
	// Model.ContainerConcurrency.
	ContainerConcurrency int64
	// Replicas the Deployment is created with.
	Replicas int32
	Profile  workload.Profile
	Model    workload.ModelConfig
}

// KPATarget is a running KPA workload.
type KPATarget struct {
	Namespace, Name string
	Workload        *workload.Workload
	profile         workload.Profile
	start           time.Time
}

// Ref implements Target.
func (k *KPATarget) Ref() (string, string) { return k.Namespace, k.Name }

// Load implements Target.
func (k *KPATarget) Load() float64 { return k.profile.Rate(time.Since(k.start)) }

// Stop stops the simulated pods.
func (k *KPATarget) Stop() { k.Workload.Stop() }

// CRDs returns a client for tidal's custom resources in the cluster.
func (s *System) CRDs() (tidalclient.Interface, error) {
	return tidalclient.NewForConfig(s.Cluster.Config())
}

// StartKPA creates the Deployment and its PodAutoscaler and starts serving
// its pods' metrics.
func (s *System) StartKPA(ctx context.Context, o KPAOptions) (*KPATarget, error) {
	if o.Profile == nil {
		return nil, errors.New("kpa target: Profile is required")
	}
	labels := map[string]string{"app": o.Name}
	if _, err := s.Cluster.Client.AppsV1().Deployments(o.Namespace).Create(ctx, cluster.Deployment(o.Name, labels, o.Replicas), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kpa target %s/%s: %w", o.Namespace, o.Name, err)
	}
	crds, err := s.CRDs()
	if err != nil {
		return nil, err
	}
	pa := &autoscalingv1alpha1.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, Annotations: o.Annotations},
		Spec: autoscalingv1alpha1.PodAutoscalerSpec{
			ScaleTargetRef:       autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: o.Name},
			Strategy:             autoscalingv1alpha1.StrategyKPA,
			ContainerConcurrency: o.ContainerConcurrency,
		},
	}
	if _, err := crds.AutoscalingV1alpha1().PodAutoscalers(o.Namespace).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kpa target %s/%s: podautoscaler: %w", o.Namespace, o.Name, err)
	}
	start := time.Now()
	w, err := workload.Start(ctx, workload.Options{
		Client: s.Cluster.Client, Namespace: o.Namespace, Deployment: o.Name,
		Profile: o.Profile, Model: o.Model,
	})
	if err != nil {
		return nil, err
	}
	return &KPATarget{Namespace: o.Namespace, Name: o.Name, Workload: w, profile: o.Profile, start: start}, nil
}

// FunctionOptions describe a Function consuming a topic on the System's
// broker, with simulated consumers (one per ready pod) and a producer.
type FunctionOptions struct {
	Namespace, Name string
	// Topic is created on the broker with Partitions partitions, and as a
	// Topic resource; it is the Function's input.
	Topic      string
	Partitions int32
	// IdleTimeout and MaxReplicas of the Function; nil means the defaults.
	IdleTimeout *time.Duration
	MaxReplicas *int32
	// Produce is the produce rate in records per second.
	Produce workload.Profile
	// RatePerPod is how many records one pod processes per second.
	RatePerPod float64
	// ColdStart is how long a pod takes before it consumes.
	ColdStart time.Duration
}

// FunctionTarget is a running Function with its producer and consumers.
type FunctionTarget struct {
	Namespace, Name, Topic string
	Partitions             int32
	Producer               *workload.Producer
	Consumers              *workload.Consumers
	profile                workload.Profile
	start                  time.Time
}

// Ref implements Target.
func (f *FunctionTarget) Ref() (string, string) { return f.Namespace, f.Name }

// Load implements Target.
func (f *FunctionTarget) Load() float64 { return f.profile.Rate(time.Since(f.start)) }

// Stop stops producing and consuming.
func (f *FunctionTarget) Stop() {
	f.Producer.Stop()
	f.Consumers.Stop()
}

// StartFunction creates the topic (on the broker and as a Topic resource)
// and the Function, then starts the consumers and the producer.
func (s *System) StartFunction(ctx context.Context, o FunctionOptions) (*FunctionTarget, error) {
	if s.Kafka == nil {
		return nil, errors.New("function target: the System runs no broker (Options.Kafka)")
	}
	if o.Produce == nil || o.Partitions < 1 {
		return nil, errors.New("function target: Produce and Partitions >= 1 are required")
	}
	if err := s.CreateTopic(ctx, o.Topic, o.Partitions); err != nil {
		return nil, err
	}
	crds, err := s.CRDs()
	if err != nil {
		return nil, err
	}
	parts := o.Partitions
	topic := &functionsv1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Name: o.Topic, Namespace: o.Namespace},
		Spec:       functionsv1alpha1.TopicSpec{Partitions: &parts},
	}
	if _, err := crds.FunctionsV1alpha1().Topics(o.Namespace).Create(ctx, topic, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("function target %s/%s: topic: %w", o.Namespace, o.Name, err)
	}
	fn := &functionsv1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: functionsv1alpha1.FunctionSpec{
			Container:   corev1.Container{Name: "main", Image: "tidal.test/fn:latest"},
			Input:       o.Topic,
			MaxReplicas: o.MaxReplicas,
		},
	}
	if o.IdleTimeout != nil {
		fn.Spec.IdleTimeout = &metav1.Duration{Duration: *o.IdleTimeout}
	}
	if _, err := crds.FunctionsV1alpha1().Functions(o.Namespace).Create(ctx, fn, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("function target %s/%s: %w", o.Namespace, o.Name, err)
	}
	cons, err := workload.StartConsumers(ctx, workload.ConsumerOptions{
		Client: s.Cluster.Client, Namespace: o.Namespace, Selector: "function=" + o.Name,
		Brokers: s.Brokers, Topic: o.Topic, Group: o.Name,
		RatePerPod: o.RatePerPod, ColdStart: o.ColdStart,
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	prod, err := workload.StartProducer(workload.ProducerOptions{Brokers: s.Brokers, Topic: o.Topic, Profile: o.Produce})
	if err != nil {
		cons.Stop()
		return nil, err
	}
	return &FunctionTarget{Namespace: o.Namespace, Name: o.Name, Topic: o.Topic, Partitions: o.Partitions,
		Producer: prod, Consumers: cons, profile: o.Produce, start: start}, nil
}

// CreateTopic creates a topic on the System's broker.
func (s *System) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// RunActivator plays Knative's activator for k until ctx ends: while the
// workload has no warm pod and requests wait, it pushes a stat with the
// waiting requests to a collector once per period, which pokes the decider
// out of zero. It returns the first push error other than ctx ending.
func (s *System) RunActivator(ctx context.Context, k *KPATarget, period time.Duration) error {
	conn, err := s.Collectors[0].Conn()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := collectorv1.NewCollectorServiceClient(conn)
	ref := &commonv1.TargetRef{Namespace: k.Namespace, Name: k.Name}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r := k.Workload.Report()
		if r.WarmPods > 0 || r.Queued == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, period)
		_, err := client.PushStats(cctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: ref, PodName: "activator-0",
			AverageConcurrency: float64(r.Queued), RequestCount: k.Load(),
		}}})
		cancel()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("activator stat for %s/%s: %w", k.Namespace, k.Name, err)
		}
	}
}

// GroupLag is a consumer group's total lag on the System's broker, read
// directly with kadm: an observer independent of the collector.
func (s *System) GroupLag(ctx context.Context, group string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		return 0, fmt.Errorf("lag of %s: %w", group, err)
	}
	defer cl.Close()
	lags, err := kadm.NewClient(cl).Lag(ctx, group)
	if err != nil {
		return 0, fmt.Errorf("lag of %s: %w", group, err)
	}
	l, ok := lags[group]
	if !ok {
		return 0, fmt.Errorf("lag of %s: no answer for the group", group)
	}
	if err := errors.Join(l.DescribeErr, l.FetchErr); err != nil {
		return 0, fmt.Errorf("lag of %s: %w", group, err)
	}
	return l.Lag.Total(), nil
}
