package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/proto/externalscaler"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	lagstrategy "github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// fakeHub holds specs up to max targets and records removals.
type fakeHub struct {
	mu      sync.Mutex
	max     int
	specs   map[string]*deciderv1.TargetSpec
	removed []string
	dropped []string
}

func newFakeHub(max int) *fakeHub {
	return &fakeHub{max: max, specs: map[string]*deciderv1.TargetSpec{}}
}

func (h *fakeHub) TrySetSpec(spec *deciderv1.TargetSpec, _ time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := spec.GetTarget().Key()
	if _, ok := h.specs[key]; !ok && len(h.specs) >= h.max {
		return false
	}
	h.specs[key] = spec
	return true
}

func (h *fakeHub) Remove(ref *commonv1.TargetRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.specs, ref.Key())
	h.removed = append(h.removed, ref.Key())
}

func (h *fakeHub) Drop(ref *commonv1.TargetRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.specs, ref.Key())
	h.dropped = append(h.dropped, ref.Key())
}

// fakeReader serves the partitions a test sets as each target's offsets,
// counting the polls.
type fakeReader struct {
	mu      sync.Mutex
	targets map[string]lag.Target
	parts   []*commonv1.PartitionLag
	err     error
	polls   int
}

func newFakeReader() *fakeReader { return &fakeReader{targets: map[string]lag.Target{}} }

func (r *fakeReader) Set(t lag.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets[t.Ref.Key()] = t
}

func (r *fakeReader) Remove(ref *commonv1.TargetRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.targets, ref.Key())
}

func (r *fakeReader) Poll(_ context.Context, ref *commonv1.TargetRef) (*commonv1.MetricSample, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.targets[ref.Key()]; !ok {
		return nil, fmt.Errorf("%w %s", lag.ErrUnknownTarget, ref.Key())
	}
	r.polls++
	if r.err != nil {
		return nil, r.err
	}
	n := int32(len(r.parts))
	return &commonv1.MetricSample{Source: commonv1.SampleSource_SAMPLE_SOURCE_KAFKA, PartitionLags: r.parts, PartitionCount: &n}, nil
}

// set makes the offsets each partition's (end, committed), committed -1
// meaning none.
func (r *fakeReader) set(offsets ...[2]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts = nil
	for i, o := range offsets {
		p := &commonv1.PartitionLag{Partition: int32(i), EndOffset: o[0]}
		if o[1] >= 0 {
			c := o[1]
			p.CommittedOffset = &c
		}
		r.parts = append(r.parts, p)
	}
}

func (r *fakeReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.polls
}

func toInput(s *commonv1.MetricSample) lagstrategy.Input {
	in := lagstrategy.Input{PartitionCount: s.GetPartitionCount()}
	for _, p := range s.GetPartitionLags() {
		in.Partitions = append(in.Partitions, lagstrategy.Partition{ID: p.GetPartition(), End: p.GetEndOffset(), Committed: p.GetCommittedOffset(), HasCommitted: p.CommittedOffset != nil})
	}
	return in
}

type inlineFixture struct {
	s      *Server
	tr     *Triggers
	hub    *fakeHub
	reader *fakeReader
	dec    *fakeDecisions
	reg    *prometheus.Registry
	now    time.Time
}

func newInlineFixture(t *testing.T, cfg Config, owners Owners, peers Peers) *inlineFixture {
	t.Helper()
	f := &inlineFixture{hub: newFakeHub(100), reader: newFakeReader(), dec: newFakeDecisions(), reg: prometheus.NewRegistry(), now: time.Unix(1_800_000_000, 0)}
	var owns func(*commonv1.TargetRef) bool
	if owners != nil {
		owns = func(ref *commonv1.TargetRef) bool { _, mine := owners.Owner(ref); return mine }
	}
	f.tr = NewTriggers(cfg, f.hub, f.reader, NewKafkaScaler, owns, f.reg, zap.NewNop())
	f.tr.now = func() time.Time { return f.now }
	f.s = New(cfg, fakeTargets{}, f.dec, &Inline{Triggers: f.tr, Owners: owners, Peers: peers}, callerOf, f.reg, zap.NewNop())
	return f
}

// billing is docs/keda.md's inline Kafka trigger, with KEDA's keys.
func billing(extra ...string) map[string]string {
	md := map[string]string{"scalerAddress": "tidal-collector.tidal-system.svc:9001", "enableTLS": "true",
		"bootstrapServers": "kafka-0.kafka.svc:9092", "consumerGroup": "billing", "topic": "invoices",
		"lagThreshold": "10", "activationLagThreshold": "5"}
	for i := 0; i+1 < len(extra); i += 2 {
		md[extra[i]] = extra[i+1]
	}
	return md
}

func soRef(md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "billing", ScalerMetadata: md}
}

func (f *inlineFixture) metrics(t *testing.T, md map[string]string) (float64, error) {
	t.Helper()
	m, err := f.s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: soRef(md), MetricName: "tidal-kafka-invoices"})
	if err != nil {
		return 0, err
	}
	v := m.GetMetricValues()[0]
	if v.GetMetricName() != "tidal-kafka-invoices" || float64(v.GetMetricValue()) != v.GetMetricValueFloat() {
		t.Errorf("metric value %v: want tidal-kafka-invoices with equal int and float values", v)
	}
	return v.GetMetricValueFloat(), nil
}

// TestInlineKEDAPolls: in keda mode each GetMetrics is one poll of the
// offsets, answered with KEDA's metric; IsActive right after answers from
// it; state carries from poll to poll (excludePersistentLag), and matches
// tidal's keda mode deciding the same offsets in order.
func TestInlineKEDAPolls(t *testing.T) {
	f := newInlineFixture(t, testConfig(), nil, nil)
	md := billing("excludePersistentLag", "true", "lag.tidal.dev/faithful", "true")
	cfg, err := lagconfig.ParseConfig("keda", map[string]string{"topic": "invoices", "lagThreshold": "10", "activationLagThreshold": "5", "excludePersistentLag": "true", "faithful": "true"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := lagstrategy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	polls := [][][2]int64{
		{{100, 40}, {30, -1}},  // first sighting counts
		{{100, 40}, {30, -1}},  // unchanged commit: excluded from the metric, not from activity
		{{120, 100}, {30, -1}}, // moved
		{{300, 0}, {500, 0}},   // capped at 2 partitions × 10
		{{3, 3}, {3, 3}},       // caught up: inactive
	}
	for i, p := range polls {
		f.reader.set(p...)
		before := f.reader.count()
		got, err := f.metrics(t, md)
		if err != nil {
			t.Fatalf("poll %d: GetMetrics: %v", i+1, err)
		}
		act, err := f.s.IsActive(context.Background(), soRef(md))
		if err != nil {
			t.Fatalf("poll %d: IsActive: %v", i+1, err)
		}
		if n := f.reader.count() - before; n != 1 {
			t.Errorf("poll %d: GetMetrics then IsActive read Kafka %d times, want once", i+1, n)
		}
		in := toInput(&commonv1.MetricSample{PartitionLags: f.reader.parts, PartitionCount: ptr(int32(len(p)))})
		want := own.Decide(&in, f.now)
		if got != want.KEDA.Metric || act.GetResult() != want.KEDA.Active {
			t.Errorf("poll %d: metric %v, active %v; tidal's keda mode: %v, %v", i+1, got, act.GetResult(), want.KEDA.Metric, want.KEDA.Active)
		}
		f.now = f.now.Add(30 * time.Second) // past the activity reuse
	}

	// IsActive alone, long after the last poll, polls.
	f.reader.set([2]int64{50, 0})
	before := f.reader.count()
	if act, err := f.s.IsActive(context.Background(), soRef(md)); err != nil || !act.GetResult() {
		t.Errorf("IsActive long after the last poll = %v, %v; want a poll saying true", act, err)
	}
	if f.reader.count() != before+1 {
		t.Errorf("IsActive long after the last poll read Kafka %d times, want once", f.reader.count()-before)
	}

	// Another metric's name costs no poll.
	before = f.reader.count()
	if _, err := f.s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: soRef(md), MetricName: "probe"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetMetrics of another metric: %v, want INVALID_ARGUMENT", err)
	}
	if f.reader.count() != before {
		t.Error("GetMetrics of another metric read Kafka")
	}

	// The target: advisory, named after the ScaledObject, its lag
	// parameters as the decider reads them, read on demand only.
	if len(f.hub.specs) != 1 {
		t.Fatalf("hub specs %v, want one", f.hub.specs)
	}
	for key, spec := range f.hub.specs {
		if !strings.HasPrefix(key, "shop/ScaledObject.keda.sh/billing-") || !spec.GetAdvisory() || spec.GetStrategy() != commonv1.Strategy_STRATEGY_LAG {
			t.Errorf("spec %s %v: want an advisory lag target of ScaledObject shop/billing", key, spec)
		}
		dcfg, err := lagconfig.FromAnnotations(spec.GetAnnotations())
		if err != nil || dcfg.Mode != lagconfig.ModeKEDA || dcfg.LagThreshold != 10 || !dcfg.ExcludePersistentLag || !dcfg.Faithful || dcfg.Topic != "invoices" {
			t.Errorf("the decider reads the spec's annotations as %+v, %v", dcfg, err)
		}
		if rt := f.reader.targets[key]; !rt.OnDemand || rt.Group != "billing" || rt.Topic != "invoices" || rt.Cluster.Allow == nil {
			t.Errorf("reader target %+v: want billing/invoices on demand, with the broker policy", rt)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestInlineKEDAErrors: a failed read is UNAVAILABLE, never a zero; the
// bounds refuse with RESOURCE_EXHAUSTED; keda mode has no pushed activity.
func TestInlineKEDAErrors(t *testing.T) {
	cfg := testConfig()
	cfg.MaxTargets = 2
	f := newInlineFixture(t, cfg, nil, nil)
	ctx := context.Background()
	f.reader.set([2]int64{10, 0})
	f.reader.err = errors.New("broker: dial tcp 10.0.0.9:9092: connection refused")
	if _, err := f.metrics(t, billing()); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("GetMetrics with the broker down: %v, want UNAVAILABLE saying why", err)
	}
	if _, err := f.s.IsActive(ctx, soRef(billing())); status.Code(err) != codes.Unavailable {
		t.Errorf("IsActive with the broker down: %v, want UNAVAILABLE", err)
	}
	f.reader.err = nil
	f.reader.set() // a topic with no partitions: nothing KEDA's arithmetic can use
	if _, err := f.metrics(t, billing()); status.Code(err) != codes.Unavailable {
		t.Errorf("GetMetrics of no partitions: %v, want UNAVAILABLE", err)
	}

	// Two targets at most (cfg.MaxTargets); a changed trigger is another.
	f.reader.set([2]int64{10, 0})
	if _, err := f.metrics(t, billing("lagThreshold", "20")); err != nil {
		t.Fatalf("second target: %v", err)
	}
	if _, err := f.metrics(t, billing("lagThreshold", "30")); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--keda-max-targets") {
		t.Errorf("a third target: %v, want RESOURCE_EXHAUSTED naming --keda-max-targets", err)
	}
	// The hub's own bound refuses too.
	g := newInlineFixture(t, testConfig(), nil, nil)
	g.hub.max = 0
	if _, err := g.metrics(t, billing()); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-targets") {
		t.Errorf("with the hub full: %v, want RESOURCE_EXHAUSTED naming --max-targets", err)
	}

	// The ScaledObject names the target: it must be there and valid.
	if _, err := f.s.GetMetricSpec(ctx, &externalscaler.ScaledObjectRef{Namespace: "shop", ScalerMetadata: billing()}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "scaledObjectRef.name") {
		t.Errorf("GetMetricSpec without a ScaledObject name: %v, want INVALID_ARGUMENT naming scaledObjectRef.name", err)
	}
}

// TestInlineBrokerPolicy: a trigger naming a broker the collector's
// policy (--kafka-brokers, --allowed-brokers) refuses is refused before
// anything is made.
func TestInlineBrokerPolicy(t *testing.T) {
	cfg := testConfig()
	cfg.Brokers = lag.BrokerPolicy{Patterns: lag.BrokerPatterns{"*.kafka.svc:9092"}}
	f := newInlineFixture(t, cfg, nil, nil)
	f.reader.set([2]int64{10, 0})
	if _, err := f.metrics(t, billing()); err != nil {
		t.Fatalf("an allowed broker: %v", err)
	}
	_, err := f.metrics(t, billing("bootstrapServers", "kafka-0.kafka.svc:9092,evil.example.com:9092"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "evil.example.com:9092") || !strings.Contains(err.Error(), "--allowed-brokers") {
		t.Errorf("a broker outside the policy: %v, want INVALID_ARGUMENT naming it and the flag", err)
	}
	if f.tr.Len() != 1 {
		t.Errorf("targets %d, want only the allowed one", f.tr.Len())
	}
	if allow := f.reader.targets[f.tr.anyKey()].Cluster.Allow; allow == nil || allow("evil.example.com:9092") || !allow("kafka-1.kafka.svc:9092") {
		t.Error("the reader's dial policy is not the flag's")
	}
}

// anyKey returns some target's key.
func (t *Triggers) anyKey() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.targets {
		return k
	}
	return ""
}

// TestInlineRateLimit: the ScaledObjects of each namespace have their own
// bucket of inline calls, whoever makes them (KEDA has one identity for
// every tenant).
func TestInlineRateLimit(t *testing.T) {
	cfg := testConfig()
	cfg.PollRate, cfg.PollBurst = 0.001, 2
	f := newInlineFixture(t, cfg, nil, nil)
	f.reader.set([2]int64{10, 0})
	call := func(caller, ns string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("caller", caller))
		ref := soRef(billing())
		ref.Namespace = ns
		_, err := f.s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
		return err
	}
	for i := range 2 {
		if err := call("keda", "shop"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := call("keda", "shop"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--keda-poll-rate") || !strings.Contains(err.Error(), `"shop"`) {
		t.Errorf("a third call in the burst: %v, want RESOURCE_EXHAUSTED naming --keda-poll-rate and the namespace", err)
	}
	if err := call("operator", "shop"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("another caller for the same namespace: %v, want the namespace's bucket empty", err)
	}
	if err := call("keda", "books"); err != nil {
		t.Errorf("the same caller for another namespace: %v, want its own bucket", err)
	}
	// GetMetricSpec reads nothing and is not counted.
	if _, err := f.s.GetMetricSpec(metadata.NewIncomingContext(context.Background(), metadata.Pairs("caller", "keda")), soRef(billing())); err != nil {
		t.Errorf("GetMetricSpec over the rate: %v", err)
	}
	if v := value(t, f.reg, "tidal_collector_keda_streams_refused_total", "reason", "poll-rate"); v != 2 {
		t.Errorf("poll-rate refusals counted %v, want 2", v)
	}
}

// TestInlineExpiryAndOwnership: a target no call named for the TTL is
// removed (its decider told), one whose bucket moved is dropped (its
// decider keeps it for the new owner); a call brings it back.
func TestInlineExpiryAndOwnership(t *testing.T) {
	owners := &fakeOwners{self: "c0:9001", owner: "c0:9001"}
	f := newInlineFixture(t, testConfig(), owners, nil)
	f.reader.set([2]int64{10, 0})
	if _, err := f.metrics(t, billing()); err != nil {
		t.Fatal(err)
	}
	key := f.tr.anyKey()
	f.now = f.now.Add(59 * time.Second)
	f.tr.sweep()
	if f.tr.Len() != 1 {
		t.Fatal("a target called a TTL ago less a second was forgotten")
	}
	f.now = f.now.Add(2 * time.Second)
	f.tr.sweep()
	if f.tr.Len() != 0 || len(f.hub.removed) != 1 || f.hub.removed[0] != key || len(f.reader.targets) != 0 {
		t.Fatalf("after the TTL: %d targets, hub removed %v, reader %d; want it gone everywhere", f.tr.Len(), f.hub.removed, len(f.reader.targets))
	}
	if v := value(t, f.reg, "tidal_collector_keda_kafka_targets_expired_total"); v != 1 {
		t.Errorf("expired counted %v, want 1", v)
	}
	if _, err := f.metrics(t, billing()); err != nil || f.tr.Len() != 1 {
		t.Fatalf("a call after expiry: %v, %d targets; want it made again", err, f.tr.Len())
	}
	owners.set("c1:9001")
	f.tr.sweep()
	if f.tr.Len() != 0 || len(f.hub.dropped) != 1 || len(f.hub.removed) != 1 {
		t.Errorf("after its bucket moved: %d targets, dropped %v, removed %v; want it dropped, not removed", f.tr.Len(), f.hub.dropped, f.hub.removed)
	}
}

type fakeOwners struct {
	mu          sync.Mutex
	self, owner string
}

func (o *fakeOwners) set(owner string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.owner = owner
}

func (o *fakeOwners) Owner(*commonv1.TargetRef) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner, o.owner == o.self
}

// TestInlineRiffMode: a riff-mode trigger answers with its decider's
// desired replicas against a target of 1, its target measured at the
// mode's interval; pushed activity follows the decisions.
func TestInlineRiffMode(t *testing.T) {
	f := newInlineFixture(t, testConfig(), nil, nil)
	md := billing("lag.tidal.dev/mode", "riff-queue", "lagThreshold", "", "activationLagThreshold", "")
	delete(md, "lagThreshold")
	delete(md, "activationLagThreshold")
	ctx := context.Background()
	spec, err := f.s.GetMetricSpec(ctx, soRef(md))
	if err != nil || spec.GetMetricSpecs()[0].GetTargetSizeFloat() != 1 {
		t.Fatalf("GetMetricSpec = %v, %v; want a target of 1", spec, err)
	}
	// Before its decider has heard of the new target: UNAVAILABLE, not
	// NOT_FOUND (it exists; KEDA retries).
	if _, err := f.s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soRef(md)}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetMetrics before the first decision: %v, want UNAVAILABLE", err)
	}
	key := f.tr.anyKey()
	rt := f.reader.targets[key]
	if rt.OnDemand || rt.Interval != 100*time.Millisecond {
		t.Errorf("reader target %+v: want read every 100 ms (riff)", rt)
	}
	ref := f.hub.specs[key].GetTarget()
	f.dec.set(ref, 5, 3)
	m, err := f.s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soRef(md)})
	if err != nil || m.GetMetricValues()[0].GetMetricValueFloat() != 3 {
		t.Errorf("GetMetrics = %v, %v; want the decider's 3", m, err)
	}
	if act, err := f.s.IsActive(ctx, soRef(md)); err != nil || !act.GetResult() {
		t.Errorf("IsActive = %v, %v; want true", act, err)
	}
	if f.reader.count() != 0 {
		t.Errorf("riff calls polled Kafka %d times: the fetcher reads riff targets, not KEDA's calls", f.reader.count())
	}
	client := serve(t, f.s)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.StreamIsActive(cctx, soRef(md))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvTimeout(t, st.Recv); err != nil || !got.GetResult() {
		t.Errorf("StreamIsActive first message %v, %v; want true", got, err)
	}
}

// TestForwardToTheOwner: a replica that does not own a trigger's bucket
// forwards the call to the one that does over KEDATargetService; the owner
// reads the trigger again and polls; a replica asked for what it does not
// own refuses.
func TestForwardToTheOwner(t *testing.T) {
	ownerOwners := &fakeOwners{self: "owner", owner: "owner"}
	owner := newInlineFixture(t, testConfig(), ownerOwners, nil)
	addr := serveTargets(t, NewTargetService(owner.s.inline))
	peers := NewPeerPool(func(string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	})
	t.Cleanup(peers.Close)
	entry := newInlineFixture(t, testConfig(), &fakeOwners{self: "entry", owner: "owner"}, peers)

	owner.reader.set([2]int64{500, 0}, [2]int64{20, 0})
	got, err := entry.metrics(t, billing())
	if err != nil {
		t.Fatalf("GetMetrics through the entry replica: %v", err)
	}
	if got != 20 || owner.reader.count() != 1 || entry.reader.count() != 0 || entry.tr.Len() != 0 || owner.tr.Len() != 1 {
		t.Errorf("metric %v; owner polled %d, entry %d; targets owner %d, entry %d: want 20 (capped at 2×10) from one poll at the owner only",
			got, owner.reader.count(), entry.reader.count(), owner.tr.Len(), entry.tr.Len())
	}
	if act, err := entry.s.IsActive(context.Background(), soRef(billing())); err != nil || !act.GetResult() || owner.reader.count() != 1 {
		t.Errorf("IsActive through the entry replica = %v, %v (owner polled %d times); want the owner's last poll, true", act, err, owner.reader.count())
	}
	// StreamIsActive's reads go to the owner too.
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := serve(t, entry.s).StreamIsActive(cctx, soRef(billing()))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvTimeout(t, st.Recv); err != nil || !got.GetResult() || owner.reader.count() < 2 || entry.reader.count() != 0 {
		t.Errorf("StreamIsActive through the entry replica = %v, %v (owner read %d times, entry %d); want true read at the owner",
			got, err, owner.reader.count(), entry.reader.count())
	}
	cancel()
	// The owner checks the metadata itself.
	_, err = entry.metrics(t, billing("lagThreshold", "0"))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad metadata: %v, want INVALID_ARGUMENT", err)
	}
	cl := collectorv1.NewKEDATargetServiceClient(dial(t, addr))
	_, err = cl.EnsureKEDATarget(context.Background(), &collectorv1.EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: map[string]string{"function": "f"}, Call: collectorv1.KEDACall_KEDA_CALL_ENSURE})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a follow trigger forwarded: %v, want INVALID_ARGUMENT", err)
	}
	// A bucket that moved since the entry looked: refused there naming the
	// new owner, not forwarded on; KEDA hears UNAVAILABLE, as for any
	// passing state.
	ownerOwners.set("third")
	if _, err := entry.metrics(t, billing()); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "third") {
		t.Errorf("at a replica that no longer owns the target: %v, want UNAVAILABLE naming the owner", err)
	}
	_, err = cl.EnsureKEDATarget(context.Background(), &collectorv1.EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: billing(), Call: collectorv1.KEDACall_KEDA_CALL_GET_METRICS})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("EnsureKEDATarget at a replica that does not own the target: %v, want FAILED_PRECONDITION", err)
	}
	// No owner known: UNAVAILABLE.
	lone := newInlineFixture(t, testConfig(), &fakeOwners{self: "entry"}, peers)
	if _, err := lone.metrics(t, billing()); status.Code(err) != codes.Unavailable {
		t.Errorf("with no owner: %v, want UNAVAILABLE", err)
	}
}

func serveTargets(t *testing.T, s collectorv1.KEDATargetServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectorv1.RegisterKEDATargetServiceServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
