package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/proto/externalscaler"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	lagstrategy "github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/kedavector"
	"github.com/tidalscale/tidal/test/testkit"
)

// kedaVectors is KEDA's Kafka scaler vectors (../shared/vectors/keda from
// the checkout's root).
var kedaVectors = flag.String("keda-vectors", "../../../shared/vectors/keda", "Directory of KEDA's Kafka scaler vectors (*.json) that TestKEDAInlineKafkaVectors replays.")

// TestKEDAInlineKafkaVectors replays KEDA's Kafka scaler vectors through
// tidal's ExternalScaler gRPC API in inline Kafka mode: a kfake broker
// holds each poll's end and committed offsets, and each poll is one
// GetMetrics followed by IsActive, as KEDA's GetMetricsAndActivity makes
// them, on the collector's run with the real decider. Faithful, the metric
// (at KEDA's milli precision), the activity and the HPA's replica count
// ceil(metric / target) are the vector's; with tidal's fixes (the default)
// they are what tidal's keda mode decides in-process on the same offsets.
// Then the decider explains such a target and the actuator never hears of
// it.
func TestKEDAInlineKafkaVectors(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(*kedaVectors, "*.json"))
	if len(files) == 0 {
		t.Skipf("no KEDA vectors in %s (-keda-vectors DIR)", *kedaVectors)
	}
	sort.Strings(files)
	dec, _ := startDeciderAndActuator(t)
	// The vectors' brokers are kfake listeners on loopback, which the
	// operator allows as a deployment would its Kafka.
	col := runCollector(t, "--discovery", "push", "--decider-addr", dec.GRPCAddr, "--allowed-brokers", "127.0.0.1:*")
	conn := dialPlain(t, col)
	waitServing(t, conn)
	keda := externalscaler.NewExternalScalerClient(conn)

	replayed := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, ok, err := kedavector.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !ok || v.LagThreshold() <= 0 || v.Topic == "" {
			continue // not a topic-named Kafka scaler vector
		}
		for _, faithful := range []bool{true, false} {
			name := strings.TrimSuffix(filepath.Base(f), ".json")
			flavour := "fixed"
			if faithful {
				flavour = "faithful"
			}
			so := fmt.Sprintf("vector-%d", replayed)
			replayed++
			t.Run(name+"/"+flavour, func(t *testing.T) { replayInline(t, keda, so, v, faithful) })
		}
	}
	if replayed < 4 {
		t.Fatalf("replayed %d vector flavours from %s, want at least two vectors", replayed, *kedaVectors)
	}
	t.Run("explained, never actuated", func(t *testing.T) {
		explainedNotActuated(t, keda, deciderv1.NewDeciderServiceClient(dialPlain(t, dec.GRPCAddr)), "http://"+dec.HTTPAddr+"/metrics")
	})
}

// waitServing waits for the collector's health service to say SERVING.
func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	var r *healthpb.HealthCheckResponse
	var err error
	testkit.Eventually(t, 30*time.Second, "the collector's health service to say SERVING", func() bool {
		r, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, func() string { return fmt.Sprintf("last health check: %v, %v", r, err) })
}

func replayInline(t *testing.T, keda externalscaler.ExternalScalerClient, so string, v *kedavector.Vector, faithful bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newVectorBroker(t, v)
	md, err := v.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	md["bootstrapServers"] = strings.Join(b.Addrs(), ",")
	md["consumerGroup"] = kedavector.Group
	md["lag.tidal.dev/faithful"] = strconv.FormatBool(faithful)
	ref := &externalscaler.ScaledObjectRef{Namespace: "vectors", Name: so, ScalerMetadata: md}

	// tidal's keda mode in-process, on the same offsets in the same order.
	cfg, err := v.LagConfig(faithful)
	if err != nil {
		t.Fatal(err)
	}
	own, err := lagstrategy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}

	spec, err := keda.GetMetricSpec(ctx, ref)
	if err != nil {
		t.Fatalf("GetMetricSpec: %v", err)
	}
	if len(spec.GetMetricSpecs()) != 1 || spec.GetMetricSpecs()[0].GetTargetSizeFloat() != float64(v.LagThreshold()) {
		t.Fatalf("GetMetricSpec = %v, want one metric against lagThreshold %d", spec, v.LagThreshold())
	}
	metric, target := spec.GetMetricSpecs()[0].GetMetricName(), spec.GetMetricSpecs()[0].GetTargetSizeFloat()
	for i, p := range v.Polls {
		at := fmt.Sprintf("poll %d", i+1)
		in := lagstrategy.Input{Partitions: p.Offsets(nil)}
		b.set(t, at, in.Partitions)

		m, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: metric})
		if err != nil {
			t.Fatalf("%s: GetMetrics: %v", at, err)
		}
		a, err := keda.IsActive(ctx, ref)
		if err != nil {
			t.Fatalf("%s: IsActive: %v", at, err)
		}
		vals := m.GetMetricValues()
		if len(vals) != 1 || vals[0].GetMetricName() != metric {
			t.Fatalf("%s: GetMetrics = %v, want one value of %s", at, m, metric)
		}
		// KEDA reads the float when it is above 0, else the integer, and
		// keeps it at milli precision.
		value := float64(vals[0].GetMetricValue())
		if f := vals[0].GetMetricValueFloat(); f > 0 {
			value = f
		}
		milli := math.Round(value * 1000)
		replicas := int64(math.Ceil(milli / (target * 1000)))

		d := own.Decide(&in, time.Now())
		if d.Status != lagstrategy.StatusOK {
			t.Fatalf("%s: tidal's keda mode in-process: %v", at, d.Err)
		}
		if wantMilli := math.Round(d.KEDA.Metric * 1000); milli != wantMilli || a.GetResult() != d.KEDA.Active {
			t.Errorf("%s: through the external scaler %vm, active %v; tidal's keda mode in-process %vm, active %v", at, milli, a.GetResult(), wantMilli, d.KEDA.Active)
		}
		if !faithful {
			continue
		}
		if p.WantMetricMilliValue != nil && milli != *p.WantMetricMilliValue {
			t.Errorf("%s: metric %vm, KEDA's kafka scaler %vm", at, milli, *p.WantMetricMilliValue)
		}
		if p.WantActive != nil && a.GetResult() != *p.WantActive {
			t.Errorf("%s: active %v, KEDA's kafka scaler %v", at, a.GetResult(), *p.WantActive)
		}
		if p.WantHPAUnclamped != nil && replicas != *p.WantHPAUnclamped {
			t.Errorf("%s: the HPA's ceil(%v / %v) = %d replicas, KEDA's %d", at, value, target, replicas, *p.WantHPAUnclamped)
		}
	}
}

// explainedNotActuated: an inline target KEDA polls is decided and
// explained by its decider (keda mode on the polled offsets), shows on
// WatchDecisions, and the decider never calls Scale for it (nor for any of
// the vectors' targets before it), though it decides to run a replica.
func explainedNotActuated(t *testing.T, keda externalscaler.ExternalScalerClient, decider deciderv1.DeciderServiceClient, deciderMetrics string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newVectorBroker(t, &kedavector.Vector{Topic: "orders"})
	b.set(t, "setup", []lagstrategy.Partition{{ID: 0, End: 40, Committed: 5, HasCommitted: true}})
	// The decider decides keda targets every pollingInterval: 1 s here.
	md := map[string]string{"bootstrapServers": strings.Join(b.Addrs(), ","), "consumerGroup": kedavector.Group, "topic": "orders", "lag.tidal.dev/pollingInterval": "1"}
	ref := &externalscaler.ScaledObjectRef{Namespace: "explain", Name: "orders", ScalerMetadata: md}
	watch, err := decider.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: "explain"})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan *commonv1.Decision, 16)
	go func() {
		for {
			r, err := watch.Recv()
			if err != nil {
				close(watched)
				return
			}
			watched <- r.GetDecision()
		}
	}()

	var (
		target *commonv1.TargetRef
		exp    *deciderv1.ExplainResponse
	)
	for exp == nil {
		m, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
		if err != nil {
			t.Fatalf("GetMetrics: %v", err)
		}
		// A lag of 35 on one partition, capped at 1 × lagThreshold.
		if got := m.GetMetricValues()[0].GetMetricValueFloat(); got != 10 {
			t.Fatalf("GetMetrics = %v, want KEDA's capped lag, 10", got)
		}
		select {
		case d, ok := <-watched:
			if !ok {
				t.Fatal("WatchDecisions ended")
			}
			if d.GetDesiredReplicas() < 0 || d.GetTarget().GetKind() != "ScaledObject" {
				continue
			}
			target = d.GetTarget()
			e, err := decider.Explain(ctx, &deciderv1.ExplainRequest{Target: target})
			if err != nil {
				t.Fatalf("Explain %s: %v", target.Key(), err)
			}
			if e.GetLag().GetKedaMetric() == 10 {
				exp = e
			}
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no decision for the inline target on WatchDecisions")
		}
	}
	if !strings.HasPrefix(target.Key(), "explain/ScaledObject.keda.sh/orders-") {
		t.Errorf("target %s, want one named after ScaledObject explain/orders", target.Key())
	}
	if in := exp.GetLag(); in.GetMode() != "keda" || !in.GetKedaActive() || exp.GetDecision().GetDesiredReplicas() < 1 {
		t.Errorf("Explain = %v: want keda mode, active, desiring a replica", exp)
	}
	// Had the decision gone to the sender, the call (refused or not) would
	// be counted by now: the sender calls within milliseconds.
	time.Sleep(time.Second)
	if n := scaleCalls(t, deciderMetrics); n != 0 {
		t.Errorf("the decider made %v Scale calls; every target here is advisory", n)
	}
}

// scaleCalls sums tidal_decider_scale_calls_total over its results.
func scaleCalls(t *testing.T, url string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// The counter shows once a call was made; the pending gauge always,
	// which says this is the decider's page.
	if !strings.Contains(string(body), "tidal_decider_scale_pending") {
		t.Fatalf("%s is not the decider's metrics", url)
	}
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "tidal_decider_scale_calls_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// vectorBroker is a kfake broker serving a vector's offsets to the
// collector, stopped with the test.
type vectorBroker struct{ *kedavector.Broker }

func newVectorBroker(t *testing.T, v *kedavector.Vector) vectorBroker {
	t.Helper()
	b, err := kedavector.NewBroker(v, kedavector.Group)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return vectorBroker{b}
}

// set makes the broker hold parts, as poll at.
func (b vectorBroker) set(t *testing.T, at string, parts []lagstrategy.Partition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Set(ctx, parts); err != nil {
		t.Fatalf("%s: %v", at, err)
	}
}

// TestKEDAInlineKafkaSharded: two collector replicas share the targets
// through bucket Leases. KEDA's calls for one inline trigger, alternating
// between them, are measured by the replica owning the trigger's bucket
// only (the other forwards them), so the polls share one state: with
// excludePersistentLag the answers are those of one scaler seeing every
// poll in order, whichever replica KEDA called.
func TestKEDAInlineKafkaSharded(t *testing.T) {
	c := cluster.Shared(t)
	leaseNS := c.Namespace(t)
	dec := startDeciderProcess(t)
	var replicas []*grpc.ClientConn
	for range 2 {
		addr := runCollector(t, "--kubeconfig", c.Kubeconfig, "--decider-addr", dec.GRPCAddr, "--buckets", "4", "--lease-namespace", leaseNS,
			"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms", "--allowed-brokers", "127.0.0.1:*")
		conn := dialPlain(t, addr)
		waitServing(t, conn)
		replicas = append(replicas, conn)
	}
	b := newVectorBroker(t, &kedavector.Vector{Topic: "payments"})
	md := map[string]string{"bootstrapServers": strings.Join(b.Addrs(), ","), "consumerGroup": kedavector.Group, "topic": "payments",
		"lagThreshold": "10", "allowIdleConsumers": "true", "excludePersistentLag": "true"}
	ref := &externalscaler.ScaledObjectRef{Namespace: "sharded", Name: "payments", ScalerMetadata: md}
	cfg, err := lagconfig.ParseConfig("keda", map[string]string{"topic": "payments", "lagThreshold": "10", "allowIdleConsumers": "true", "excludePersistentLag": "true"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := lagstrategy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Until both replicas hold their buckets a call may find no owner, and
	// a bucket may still move to the replica it belongs with (whose
	// measurement starts afresh).
	waitBucketsSettled(t, c, leaseNS, 4, 2)
	b.set(t, "setup", []lagstrategy.Partition{{ID: 0, End: 1, Committed: 1, HasCommitted: true}})
	for i := 0; ; i++ {
		_, err0 := externalscaler.NewExternalScalerClient(replicas[0]).GetMetricSpec(ctx, ref)
		_, err1 := externalscaler.NewExternalScalerClient(replicas[1]).IsActive(ctx, ref)
		_, err2 := externalscaler.NewExternalScalerClient(replicas[0]).IsActive(ctx, ref)
		if err0 == nil && err1 == nil && err2 == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replicas never both answered: %v; %v; %v", err0, err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The setup's IsActive calls were polls: the in-process scaler makes
	// the same (its state is the first sighting of the commit).
	in := lagstrategy.Input{Partitions: []lagstrategy.Partition{{ID: 0, End: 1, Committed: 1, HasCommitted: true}}}
	own.Decide(&in, time.Now())

	polls := [][2]int64{{100, 40}, {100, 40}, {150, 40}, {150, 90}, {150, 90}, {200, 150}}
	for i, p := range polls {
		at := fmt.Sprintf("poll %d", i+1)
		parts := []lagstrategy.Partition{{ID: 0, End: p[0], Committed: p[1], HasCommitted: true}}
		b.set(t, at, parts)
		keda := externalscaler.NewExternalScalerClient(replicas[i%2])
		m, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
		if err != nil {
			t.Fatalf("%s through replica %d: %v", at, i%2, err)
		}
		in := lagstrategy.Input{Partitions: parts}
		want := own.Decide(&in, time.Now())
		if got := m.GetMetricValues()[0].GetMetricValueFloat(); got != want.KEDA.Metric {
			t.Errorf("%s through replica %d: metric %v, one scaler seeing every poll: %v", at, i%2, got, want.KEDA.Metric)
		}
	}
	// One replica holds the target; the other only forwarded.
	holders := 0
	for i, conn := range replicas {
		list, err := collectorv1.NewCollectorServiceClient(conn).ListTargets(ctx, &collectorv1.ListTargetsRequest{Namespace: "sharded"})
		if err != nil {
			t.Fatalf("ListTargets of replica %d: %v", i, err)
		}
		holders += len(list.GetTargets())
	}
	if holders != 1 {
		t.Errorf("%d replicas hold the inline target, want exactly one", holders)
	}
}

// waitBucketsSettled waits until the buckets' Leases have had the same
// holders for three seconds, with every bucket held and every replica's
// member Lease live.
func waitBucketsSettled(t *testing.T, c *cluster.Cluster, ns string, buckets, replicas int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last string
	since := time.Now()
	for {
		list, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list Leases: %v", err)
		}
		var holders []string
		members := 0
		for _, l := range list.Items {
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			switch {
			case h == "":
			case strings.HasPrefix(l.Name, "tidal-collector-member-"):
				members++
			default:
				holders = append(holders, l.Name+"="+h)
			}
		}
		sort.Strings(holders)
		sig := strings.Join(holders, ",")
		if sig != last || len(holders) != buckets || members != replicas {
			last, since = sig, time.Now()
		} else if time.Since(since) >= 3*time.Second {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the bucket Leases did not settle: %s, %d members", sig, members)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
