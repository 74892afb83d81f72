package keda

import (
	"context"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/kedavector"
)

// vectorsDir holds KEDA's Kafka scaler vectors (../shared/vectors/keda from
// the checkout's root; `make keda` passes SHARED's).
var vectorsDir = flag.String("vectors", "../../../shared/vectors/keda", "Directory of KEDA's Kafka scaler vectors (*.json).")

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
		v, ok, err := kedavector.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !ok || v.LagThreshold() <= 0 {
			continue // another family's file
		}
		if v.Topic != "" && v.Topic != kedavector.Topic {
			t.Fatalf("%s: topic %q; the vectors' README says %q", f, v.Topic, kedavector.Topic)
		}
		for _, fl := range flavours {
			name := strings.TrimSuffix(filepath.Base(f), ".json") + "/" + fl.name
			soName := fmt.Sprintf("vector-%d", n)
			n++
			t.Run(name, func(t *testing.T) {
				kedaLog.follow(t)
				replayVector(t, d, ex, e, soName, v, fl.faithful)
			})
		}
	}
}

func replayVector(t *testing.T, d *deployment, ex *examples, e exampleTrigger, soName string, v *kedavector.Vector, faithful bool) {
	broker := newVectorBroker(t, v)
	// The example's trigger with the vector's keys: tidal's own options
	// (lag.tidal.dev/*) are the example's, but for the flavour.
	overrides := map[string]string{}
	for k := range e.trigger().Metadata {
		if strings.HasPrefix(k, "lag.tidal.dev/") {
			overrides[k] = ""
		}
	}
	md, err := v.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(overrides, md)
	overrides["consumerGroup"] = kedavector.Group
	overrides["bootstrapServers"] = strings.Join(broker.Addrs(), ",")
	overrides["lag.tidal.dev/faithful"] = strconv.FormatBool(faithful)
	cfg := d.apply(t, ex, e, soName, overrides)
	s := newScaler(t, cfg)

	// tidal's own keda mode, in-process, on the same keys.
	lcfg, err := v.LagConfig(faithful)
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
		in := lag.Input{Partitions: p.Offsets(nil)}
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
			if got := specs[0].External.Target.AverageValue.MilliValue(); got != v.LagThreshold()*1000 {
				t.Errorf("metric target %dm; want lagThreshold %d", got, v.LagThreshold())
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
		threshold := v.LagThreshold() * 1000
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

// vectorBroker is a kfake broker serving a vector's offsets, stopped with
// the test.
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
func (b vectorBroker) set(t *testing.T, at string, parts []lag.Partition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Set(ctx, parts); err != nil {
		t.Fatalf("%s: %v", at, err)
	}
}
