package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/logkey"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Hub takes a measured target's spec and samples to its decider: the
// collector's stream hub.
type Hub interface {
	// TrySetSpec adds or updates a target; false when the hub is full.
	TrySetSpec(spec *deciderv1.TargetSpec, retention time.Duration) bool
	// Remove forgets a target and tells its decider; Drop forgets one
	// another replica now measures.
	Remove(ref *commonv1.TargetRef)
	Drop(ref *commonv1.TargetRef)
}

// Reader reads Kafka lag: the collector's lag fetcher. It records what it
// reads in the Hub.
type Reader interface {
	Set(t lag.Target)
	Remove(ref *commonv1.TargetRef)
	Poll(ctx context.Context, ref *commonv1.TargetRef) (*commonv1.MetricSample, error)
}

// KafkaScaler is KEDA's Kafka scaler for one trigger in keda mode: each
// Poll is one of KEDA's polls on the offsets read for it, and it keeps what
// KEDA keeps from one poll to the next (the committed offsets that
// excludePersistentLag compares). It returns KEDA's metric (the capped
// total lag, at least 0) and activity, or an error when the offsets cannot
// be used; never a zero standing in for "not known". Not safe for
// concurrent use.
type KafkaScaler interface {
	Poll(s *commonv1.MetricSample, at time.Time) (metric float64, active bool, err error)
}

// KafkaScalerFactory makes a trigger's KafkaScaler from its configuration.
type KafkaScalerFactory func(cfg lagconfig.Config) (KafkaScaler, error)

// Call is what a KEDA call asks of an inline trigger's target.
type Call int

const (
	// CallEnsure keeps the target measured (riff modes: the decider
	// answers).
	CallEnsure Call = iota + 1
	// CallGetMetrics is one poll (GetMetrics, keda mode).
	CallGetMetrics
	// CallIsActive is the activity of the latest poll while it is recent,
	// else of a new poll (IsActive, keda mode).
	CallIsActive
	// CallActivity is KEDA's activity on offsets read now, moving none of
	// the polls' state (StreamIsActive, keda mode): activity depends on the
	// offsets alone, the metric on earlier polls too (excludePersistentLag).
	CallActivity
)

// Poll is one of KEDA's polls of a keda-mode trigger.
type Poll struct {
	// Time is when the offsets were read.
	Time time.Time
	// Metric is KEDA's metric, the total lag after its cap; Active its
	// activity.
	Metric float64
	Active bool
}

// Conditions Triggers reports; the server maps them to status codes.
var (
	// ErrTooManyTargets: a new target would pass Config.MaxTargets or the
	// hub's bound.
	ErrTooManyTargets = errors.New("too many inline Kafka targets")
	// ErrMeasure: the offsets could not be read or used. KEDA gets no
	// number, never a zero.
	ErrMeasure = errors.New("lag not measured")
)

// Triggers holds the inline Kafka triggers this collector replica measures:
// for each, a target in the hub (advisory, so the decider decides and
// explains it and the actuator never scales it), a lag reader target, and
// in keda mode the KEDA scaler state its polls share. A target lives while
// KEDA calls name it (Config.TargetTTL) and this replica owns its bucket.
type Triggers struct {
	cfg     Config
	hub     Hub
	reader  Reader
	scalers KafkaScalerFactory
	// owns says whether this replica measures ref; nil means every one.
	owns func(ref *commonv1.TargetRef) bool
	now  func() time.Time
	log  *zap.Logger
	// polls holds a token per Kafka read in flight (Config.MaxPolls).
	polls chan struct{}

	pollsDone *prometheus.CounterVec
	refused   prometheus.Counter
	expired   prometheus.Counter

	// mu guards targets and each trigger's seen.
	mu      sync.Mutex
	targets map[string]*trigger
}

// trigger is one inline target.
type trigger struct {
	ref *commonv1.TargetRef
	// seen is the last KEDA call naming it; auth how its brokers are
	// reached, as that call gave it. Guarded by Triggers.mu.
	seen time.Time
	auth lag.Auth

	// mu serialises the target's polls, so KEDA's state moves one poll at
	// a time; it guards scaler, last and polled.
	mu     sync.Mutex
	scaler KafkaScaler
	last   Poll
	polled bool
}

// NewTriggers returns an empty Triggers; owns may be nil (no sharding).
func NewTriggers(cfg Config, hub Hub, reader Reader, scalers KafkaScalerFactory, owns func(*commonv1.TargetRef) bool, reg prometheus.Registerer, log *zap.Logger) *Triggers {
	t := &Triggers{cfg: cfg, hub: hub, reader: reader, scalers: scalers, owns: owns, now: time.Now, log: log,
		polls: make(chan struct{}, cfg.MaxPolls), targets: map[string]*trigger{}}
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_collector_keda_kafka_targets",
		Help: "Inline Kafka targets (KEDA triggers with bootstrapServers) this collector measures.",
	}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.targets))
	})
	t.pollsDone = f.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_collector_keda_kafka_polls_total",
		Help: "KEDA polls of inline Kafka triggers in keda mode (and StreamIsActive's reads of their activity), by result: ok, error.",
	}, []string{"result"})
	t.pollsDone.WithLabelValues("ok")
	t.pollsDone.WithLabelValues("error")
	t.refused = f.NewCounter(prometheus.CounterOpts{
		Name: "tidal_collector_keda_kafka_targets_refused_total",
		Help: "Inline Kafka targets refused because --keda-max-targets or --max-targets were held.",
	})
	t.expired = f.NewCounter(prometheus.CounterOpts{
		Name: "tidal_collector_keda_kafka_targets_expired_total",
		Help: "Inline Kafka targets forgotten after --keda-target-ttl without a KEDA call.",
	})
	return t
}

// Serve answers one KEDA call for the trigger k of the ScaledObject
// namespace/name (both valid): it keeps the trigger's target measured and,
// for CallGetMetrics and CallIsActive in keda mode, returns the poll that
// answers it (for CallActivity, the activity alone). It returns the
// target.
func (t *Triggers) Serve(ctx context.Context, namespace, name string, k *Kafka, call Call) (*commonv1.TargetRef, *Poll, error) {
	tr, err := t.ensure(namespace, name, k)
	if err != nil {
		return nil, nil, err
	}
	if !k.KEDAMode() || call == CallEnsure {
		return tr.ref, nil, nil
	}
	if call == CallActivity {
		// A scaler of its own, fresh: no poll's state is read or moved.
		sc, err := t.scalers(k.Config)
		if err != nil {
			return tr.ref, nil, fmt.Errorf("%w: KEDA's scaler for %s: %w", ErrMeasure, tr.ref.Key(), err)
		}
		p, err := t.read(ctx, tr, sc)
		if err != nil {
			return tr.ref, nil, err
		}
		p.Metric = 0 // the metric of a fresh scaler is not the trigger's
		return tr.ref, &p, nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if call == CallIsActive && tr.polled && t.cfg.ActivityReuse > 0 && t.now().Sub(tr.last.Time) <= t.cfg.ActivityReuse {
		p := tr.last
		return tr.ref, &p, nil
	}
	// A poll: the reader records the offsets for the decider too.
	p, err := t.read(ctx, tr, tr.scaler)
	if err != nil {
		return tr.ref, nil, err
	}
	tr.last, tr.polled = p, true
	return tr.ref, &p, nil
}

// ensure returns the trigger's target, making it if new.
func (t *Triggers) ensure(namespace, name string, k *Kafka) (*trigger, error) {
	ref := k.Target(namespace, name)
	key := ref.Key()
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.targets[key]; ok {
		tr.seen = now
		if !reflect.DeepEqual(tr.auth, k.Auth) {
			// A rotated credential (a new Secret behind ...FromEnv):
			// the same measurement, through a client with the new one.
			tr.auth = k.Auth
			t.reader.Set(t.lagTarget(tr.ref, k))
		}
		return tr, nil
	}
	if len(t.targets) >= t.cfg.MaxTargets {
		t.refused.Inc()
		return nil, fmt.Errorf("%w: this collector measures %d (--keda-max-targets); idle ones go after --keda-target-ttl", ErrTooManyTargets, t.cfg.MaxTargets)
	}
	tr := &trigger{ref: ref, seen: now}
	if k.KEDAMode() {
		sc, err := t.scalers(k.Config)
		if err != nil {
			// Parse validated the configuration: this is a bug, not bad input.
			return nil, fmt.Errorf("%w: KEDA's scaler for %s: %w", ErrMeasure, key, err)
		}
		tr.scaler = sc
	}
	spec := k.Spec(ref)
	if err := spec.ValidateField("spec"); err != nil {
		// A spec the decider would refuse ends the collector's stream to
		// it, for every target on it.
		return nil, fmt.Errorf("%w: the decider would refuse the target's spec: %w", ErrMeasure, err)
	}
	if !t.hub.TrySetSpec(spec, 0) {
		t.refused.Inc()
		return nil, fmt.Errorf("%w: this collector holds --max-targets targets", ErrTooManyTargets)
	}
	tr.auth = k.Auth
	t.reader.Set(t.lagTarget(ref, k))
	t.targets[key] = tr
	t.log.Info("KEDA inline Kafka target created", logkey.Target(key), zap.String("mode", string(k.Mode)), zap.String("topic", k.Topic), zap.String("group", k.Group))
	return tr, nil
}

// lagTarget is what the lag reader measures for trigger k.
func (t *Triggers) lagTarget(ref *commonv1.TargetRef, k *Kafka) lag.Target {
	// The server checked the seeds against the broker policy; it also
	// checks every broker they advertise. Were a seed refused after all,
	// every dial is checked, and refused.
	c := lag.Cluster{Brokers: k.Brokers, Auth: k.Auth}
	if checked, err := t.cfg.Brokers.Cluster(c); err == nil {
		c = checked
	} else {
		c.Allow = t.cfg.Brokers.Allows
	}
	return lag.Target{
		Ref:     ref,
		Cluster: c,
		Topic:   k.Topic,
		Group:   k.Group,
		// Without a topic, keda mode sums every topic the group commits
		// on, as KEDA does; the riff modes read one input topic.
		AllTopics: k.Topic == "" && k.KEDAMode(),
		Interval:  k.Config.TickInterval,
		// keda mode reads at KEDA's polls only; the riff modes at their
		// own interval, for the decider that answers them.
		OnDemand: k.KEDAMode(),
	}
}

// read reads tr's offsets now, within Config.MaxPolls reads in flight, and
// runs sc on them.
func (t *Triggers) read(ctx context.Context, tr *trigger, sc KafkaScaler) (Poll, error) {
	select {
	case t.polls <- struct{}{}:
		defer func() { <-t.polls }()
	case <-ctx.Done():
		t.pollsDone.WithLabelValues("error").Inc()
		return Poll{}, fmt.Errorf("%w: waited for one of --keda-max-polls Kafka reads: %w", ErrMeasure, ctx.Err())
	}
	s, err := t.reader.Poll(ctx, tr.ref)
	at := t.now()
	var p Poll
	if err == nil {
		p = Poll{Time: at}
		p.Metric, p.Active, err = sc.Poll(s, at)
	}
	if err != nil {
		t.pollsDone.WithLabelValues("error").Inc()
		return Poll{}, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	t.pollsDone.WithLabelValues("ok").Inc()
	return p, nil
}

// Run forgets, every Config.OwnerCheck, the targets no KEDA call named for
// Config.TargetTTL (and tells their decider) and those whose bucket another
// replica now owns (which goes on from what the decider holds), until ctx
// ends.
func (t *Triggers) Run(ctx context.Context) error {
	wait.UntilWithContext(ctx, func(context.Context) { t.sweep() }, t.cfg.OwnerCheck)
	return nil
}

func (t *Triggers) sweep() {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, tr := range t.targets {
		idle := now.Sub(tr.seen) > t.cfg.TargetTTL
		moved := t.owns != nil && !t.owns(tr.ref)
		if !idle && !moved {
			continue
		}
		delete(t.targets, key)
		t.reader.Remove(tr.ref)
		if idle {
			t.expired.Inc()
			t.hub.Remove(tr.ref)
			t.log.Info("KEDA inline Kafka target expired", logkey.Target(key), zap.Duration("ttl", t.cfg.TargetTTL))
			continue
		}
		t.hub.Drop(tr.ref)
		t.log.Info("KEDA inline Kafka target moved to another collector", logkey.Target(key))
	}
}

// Len returns the number of targets.
func (t *Triggers) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.targets)
}
