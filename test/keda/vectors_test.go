package keda

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/cluster"
)

// vectorsDir holds KEDA's Kafka scaler vectors (../shared/vectors/keda from
// the checkout's root; `make keda` passes SHARED's).
var vectorsDir = flag.String("vectors", "../../../shared/vectors/keda", "Directory of KEDA's Kafka scaler vectors (*.json).")

// The vectors' topic and group.
const (
	vectorTopic = "vec-topic"
	vectorGroup = "vec-group"
)

// kedaVector is one vector file (the format is in the vectors' README).
type kedaVector struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	// Config holds KEDA's kafka trigger keys; every one is passed on, so a
	// vector with a key this file does not know still replays as written.
	Config map[string]json.RawMessage `json:"config"`
	Polls  []struct {
		Partitions []struct {
			Partition int32  `json:"partition"`
			Latest    int64  `json:"latest"`
			Committed *int64 `json:"committed"`
		} `json:"partitions"`
		WantMetricMilliValue *float64 `json:"want_metric_milli_value"`
		WantActive           *bool    `json:"want_active"`
		WantHPAUnclamped     *int64   `json:"hpa_desired_replicas_unclamped"`
	} `json:"polls"`
}

// metadata is the vector's configuration as KEDA kafka trigger keys, each
// value as a ScaledObject's metadata writes it; the topic unless the
// vector reads every topic of the group.
func (v *kedaVector) metadata() (map[string]string, error) {
	md := map[string]string{"consumerGroup": vectorGroup}
	if v.Topic != "" {
		md["topic"] = v.Topic
	}
	for k, raw := range v.Config {
		var val any
		if err := json.Unmarshal(raw, &val); err != nil {
			return nil, fmt.Errorf("config.%s: %w", k, err)
		}
		switch x := val.(type) {
		case nil:
		case string:
			md[k] = x
		case bool, float64:
			md[k] = strings.TrimSpace(string(raw))
		default:
			return nil, fmt.Errorf("config.%s: %s is not a string, number or boolean", k, quote(string(raw)))
		}
	}
	return md, nil
}

// lagThreshold is the vector's lagThreshold, 0 when it has none.
func (v *kedaVector) lagThreshold() int64 {
	var n int64
	_ = json.Unmarshal(v.Config["lagThreshold"], &n)
	return n
}

// flavours of tidal's keda mode the replay runs: faithful (KEDA's numbers,
// faults included: the vectors' own) and the default, with tidal's fixes.
var flavours = []struct {
	name     string
	faithful bool
}{{"faithful", true}, {"fixed", false}}

// TestInlineKafkaVectors replays KEDA's Kafka scaler vectors through KEDA's
// external scaler client against tidal's inline Kafka mode: a kfake broker
// holds each poll's end and committed offsets, the trigger is the README's
// inline Kafka example with the vector's keys, and every poll is one
// GetMetricsAndActivity. KEDA-through-tidal must read what tidal's own keda
// mode decides in-process on the same offsets (strategy/lag, as
// test/conformance replays the vectors), and in the faithful flavour what
// KEDA's kafka scaler itself read (the vector): the metric, the activity and
// the HPA's replica count. A tidal that answers inline Kafka with
// UNIMPLEMENTED skips each vector once the broker holds its first offsets.
func TestInlineKafkaVectors(t *testing.T) {
	kedaLog.follow(t)
	files, err := filepath.Glob(filepath.Join(*vectorsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Skipf("no KEDA vectors in %s (-vectors DIR): nothing to replay", *vectorsDir)
	}
	sort.Strings(files)
	ex := loadExamples(t)
	found := ex.find("bootstrapServers", "external", "external-push")
	if len(found) == 0 {
		t.Fatalf("no example ScaledObject with an inline Kafka trigger (bootstrapServers) in %s", *examplesDir)
	}
	e := found[0]
	c := cluster.Shared(t)
	installKEDACRDs(t, c)
	tc := newCerts(t)
	sys := startTidal(t, c, tc, false)
	ns := c.Namespace(t)
	d := &deployment{c: c, kube: kubeClient(t, c), ns: ns, scalerAddr: sys.Collectors[0].GRPCAddr, certs: tc}

	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v kedaVector
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(v.Polls) == 0 || v.lagThreshold() <= 0 {
			continue // another family's file
		}
		if v.Topic != "" && v.Topic != vectorTopic {
			t.Fatalf("%s: topic %q; the vectors' README says %q", f, v.Topic, vectorTopic)
		}
		for _, fl := range flavours {
			name := strings.TrimSuffix(filepath.Base(f), ".json") + "/" + fl.name
			soName := fmt.Sprintf("vector-%d", n)
			n++
			t.Run(name, func(t *testing.T) {
				kedaLog.follow(t)
				replayVector(t, d, ex, e, soName, &v, fl.faithful)
			})
		}
	}
}

func replayVector(t *testing.T, d *deployment, ex *examples, e exampleTrigger, soName string, v *kedaVector, faithful bool) {
	broker := newVectorBroker(t, v)
	// The example's trigger with the vector's keys: tidal's own options
	// (lag.tidal.dev/*) are the example's, but for the flavour.
	overrides := map[string]string{}
	for k := range e.trigger().Metadata {
		if strings.HasPrefix(k, "lag.tidal.dev/") {
			overrides[k] = ""
		}
	}
	md, err := v.metadata()
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(overrides, md)
	overrides["bootstrapServers"] = strings.Join(broker.addrs, ",")
	overrides["lag.tidal.dev/faithful"] = strconv.FormatBool(faithful)
	cfg := d.apply(t, ex, e, soName, overrides)
	s := newScaler(t, cfg)

	// tidal's own keda mode, in-process, on the same keys.
	params := maps.Clone(md)
	delete(params, "consumerGroup")
	params["faithful"] = strconv.FormatBool(faithful)
	lcfg, err := lag.ParseConfig(string(lag.ModeKEDA), params)
	if err != nil {
		t.Fatalf("tidal's keda mode refuses the vector's keys: %v", err)
	}
	own, err := lag.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	base := time.Now()
	var metric string
	for i, p := range v.Polls {
		at := fmt.Sprintf("poll %d", i+1)
		in := lag.Input{}
		for _, q := range p.Partitions {
			part := lag.Partition{ID: q.Partition, End: q.Latest}
			if q.Committed != nil {
				part.Committed, part.HasCommitted = *q.Committed, true
			}
			in.Partitions = append(in.Partitions, part)
		}
		broker.set(t, at, in.Partitions)

		if metric == "" {
			// GetMetricSpec reads no offsets; every GetMetrics is a poll,
			// so none is made but the polls'.
			specs := s.GetMetricSpecForScaling(ctx)
			if len(specs) == 0 {
				_, _, err := s.GetMetricsAndActivity(ctx, scalers.GenerateMetricNameWithIndex(cfg.TriggerIndex, "tidal-kafka"))
				if status.Code(err) == codes.Unimplemented {
					t.Skipf("tidal does not serve inline Kafka yet (%v); the broker held poll 1's offsets", err)
				}
				t.Fatalf("KEDA's GetMetricSpecForScaling gave no spec (KEDA logs tidal's error above; GetMetrics: %v)", err)
			}
			if len(specs) != 1 || specs[0].External == nil || specs[0].External.Target.AverageValue == nil {
				t.Fatalf("KEDA's metric spec: %+v; want one External AverageValue metric", specs)
			}
			if got := specs[0].External.Target.AverageValue.MilliValue(); got != v.lagThreshold()*1000 {
				t.Errorf("metric target %dm; want lagThreshold %d", got, v.lagThreshold())
			}
			metric = specs[0].External.Metric.Name
		}

		vals, active, err := s.GetMetricsAndActivity(ctx, metric)
		if err != nil {
			t.Fatalf("%s: KEDA's GetMetricsAndActivity: %v", at, err)
		}
		if len(vals) != 1 {
			t.Fatalf("%s: KEDA's metric values %v; want one", at, values(vals))
		}
		milli := vals[0].Value.MilliValue()
		dec := own.Decide(&in, base.Add(time.Duration(i)*lcfg.TickInterval))
		if dec.Status != lag.StatusOK {
			t.Fatalf("%s: tidal's keda mode in-process: %v", at, dec.Err)
		}
		ownMilli := int64(math.Round(dec.KEDA.Metric * 1000))
		threshold := v.lagThreshold() * 1000
		if milli != ownMilli || active != dec.KEDA.Active {
			t.Errorf("%s: KEDA through tidal read %dm, active %v; tidal's keda mode in-process: %dm, active %v", at, milli, active, ownMilli, dec.KEDA.Active)
		}
		if got, want := ceilDiv(milli, threshold), ceilDiv(ownMilli, threshold); got != want {
			t.Errorf("%s: HPA replicas from KEDA through tidal %d; from tidal's keda mode %d", at, got, want)
		}
		if !faithful {
			continue
		}
		if p.WantMetricMilliValue != nil && milli != int64(*p.WantMetricMilliValue) {
			t.Errorf("%s: KEDA through tidal read %dm; KEDA's kafka scaler read %vm", at, milli, *p.WantMetricMilliValue)
		}
		if p.WantActive != nil && active != *p.WantActive {
			t.Errorf("%s: KEDA through tidal: active %v; KEDA's kafka scaler: %v", at, active, *p.WantActive)
		}
		if p.WantHPAUnclamped != nil && ceilDiv(milli, threshold) != *p.WantHPAUnclamped {
			t.Errorf("%s: HPA replicas from KEDA through tidal %d; from KEDA's kafka scaler %d", at, ceilDiv(milli, threshold), *p.WantHPAUnclamped)
		}
	}
}

// ceilDiv is ceil(a / b) for b > 0, the HPA's unclamped count for an
// AverageValue metric a against target b.
func ceilDiv(a, b int64) int64 { return int64(math.Ceil(float64(a) / float64(b))) }

// vectorBroker is a kfake broker whose vec-topic and vec-group hold a
// poll's offsets.
type vectorBroker struct {
	kf    *kfake.Cluster
	addrs []string
	parts int32
}

func newVectorBroker(t *testing.T, v *kedaVector) *vectorBroker {
	t.Helper()
	var parts int32
	for _, p := range v.Polls {
		for _, q := range p.Partitions {
			parts = max(parts, q.Partition+1)
		}
	}
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, vectorTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	return &vectorBroker{kf: kf, addrs: kf.ListenAddrs(), parts: parts}
}

// set makes the topic's end offsets and the group's commits those of parts,
// then reads them back.
func (b *vectorBroker) set(t *testing.T, at string, parts []lag.Partition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, closeAdm := b.client(t)
	ends, err := b.ends(ctx, adm)
	if err != nil {
		t.Fatalf("%s: %v", at, err)
	}
	for _, p := range parts {
		if p.End < ends[p.ID] {
			// A log never shrinks: the vector's topic was recreated.
			if err := b.recreate(ctx, adm); err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			ends = map[int32]int64{}
			break
		}
	}
	// A new client, which knows the topic as it is now (a recreated topic
	// has a new id).
	closeAdm()
	adm, closeAdm = b.client(t)
	defer closeAdm()
	for _, p := range parts {
		n := p.End - ends[p.ID]
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: vectorTopic, Partition: p.ID, Value: []byte("v")}
		}
		if err := adm.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s: produce to partition %d: %v", at, p.ID, err)
		}
	}
	commits := kadm.Offsets{}
	var uncommitted []int32
	for _, p := range parts {
		if p.HasCommitted {
			commits.AddOffset(vectorTopic, p.ID, p.Committed, -1)
		} else {
			uncommitted = append(uncommitted, p.ID)
		}
	}
	if len(commits) > 0 {
		resp, err := adm.CommitOffsets(ctx, vectorGroup, commits)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("%s: commit: %v", at, err)
		}
	}
	if len(uncommitted) > 0 {
		ts := kadm.TopicsSet{}
		ts.Add(vectorTopic, uncommitted...)
		if _, err := adm.DeleteOffsets(ctx, vectorGroup, ts); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			t.Fatalf("%s: delete commits of partitions %v: %v", at, uncommitted, err)
		}
	}

	// Read back what a lag reader will see.
	if ends, err = b.ends(ctx, adm); err != nil {
		t.Fatalf("%s: %v", at, err)
	}
	fetched, err := adm.FetchOffsets(ctx, vectorGroup)
	if errors.Is(err, kerr.GroupIDNotFound) {
		fetched, err = kadm.OffsetResponses{}, nil // no commit at all
	}
	if err != nil {
		t.Fatalf("%s: fetch commits: %v", at, err)
	}
	for _, p := range parts {
		if ends[p.ID] != p.End {
			t.Fatalf("%s: partition %d ends at %d on the broker; the vector says %d", at, p.ID, ends[p.ID], p.End)
		}
		o, ok := fetched.Lookup(vectorTopic, p.ID)
		has := ok && o.Err == nil && o.At >= 0
		if has != p.HasCommitted || (has && o.At != p.Committed) {
			t.Fatalf("%s: partition %d: broker's commit %+v (present %v); the vector says %d (present %v)", at, p.ID, o, has, p.Committed, p.HasCommitted)
		}
	}
}

// admin is a kadm client with its kgo client, which produces to chosen
// partitions.
type admin struct {
	*kadm.Client
	cl *kgo.Client
}

func (b *vectorBroker) client(t *testing.T) (*admin, func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	return &admin{Client: kadm.NewClient(cl), cl: cl}, cl.Close
}

func (b *vectorBroker) ends(ctx context.Context, adm *admin) (map[int32]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, vectorTopic)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	out := map[int32]int64{}
	var ferr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = fmt.Errorf("end offset of partition %d: %w", o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

func (b *vectorBroker) recreate(ctx context.Context, adm *admin) error {
	if _, err := adm.DeleteTopic(ctx, vectorTopic); err != nil {
		return fmt.Errorf("recreate %s: delete: %w", vectorTopic, err)
	}
	resp, err := adm.CreateTopic(ctx, b.parts, 1, nil, vectorTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("recreate %s: create: %w", vectorTopic, err)
	}
	return nil
}
