package benchknative

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	netcfg "knative.dev/networking/pkg/config"
	autoscalingv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	knmetrics "knative.dev/serving/pkg/autoscaler/metrics"
	"knative.dev/serving/pkg/autoscaler/scaling"
	"knative.dev/serving/pkg/resources"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// The fleet: N revisions, 10 per namespace, one ready pod each, concurrency
// 40–58 (each decides 1 pod), 180 s of one stat per second: the layout of
// Knative's tick benchmark in spec/knative-perf.md.

func fleetName(i int) (ns, rev string) {
	return fmt.Sprintf("ns-%d", i/10), fmt.Sprintf("rev-%d", i)
}

func fleetConcurrency(i int) float64 { return float64(40 + i%19) }

// knRevision is the benchmark's handle on one Knative revision: the real
// scaler and the decider status its runner would keep.
type knRevision struct {
	key    types.NamespacedName
	scaler scaling.UniScaler
	status scaling.DeciderStatus
}

// knFleet is Knative's autoscaler state for N revisions, built as the
// autoscaler binary builds it: a MetricCollector whose collections hold the
// four windows and a real stats scraper each, and a MultiScaler whose
// factory makes the binary's scaler (an attribute set, a PodAccessor and
// scaling.New). Only the ready count is given (givenCount), and the two
// goroutines per revision are parked (heldScraper, heldScaler).
type knFleet struct {
	coll    *knmetrics.MetricCollector
	multi   *scaling.MultiScaler
	revs    []knRevision
	log     *zap.SugaredLogger
	stop    chan struct{}
	release chan struct{}
	// goroutines is the count before the fleet was built.
	goroutines int
}

func newKnFleet(b *testing.B, n int) (*knFleet, memSnapshot, memSnapshot) {
	b.Helper()
	f := &knFleet{
		revs:    make([]knRevision, n),
		log:     knLogger().Sugar(),
		stop:    make(chan struct{}),
		release: make(chan struct{}),
	}
	spec := knDeciderSpec(b)
	// The informer's pod cache is not autoscaler state: the lister stays
	// empty (Knative's harness excluded informer caches too).
	lister := corelisters.NewPodLister(podIndexer())
	inner := make(map[types.NamespacedName]scaling.UniScaler, n)
	before := snapshot()
	f.goroutines = before.goroutines

	scrapers := func(m *autoscalingv1alpha1.Metric, log *zap.SugaredLogger) (knmetrics.StatsScraper, error) {
		acc := resources.NewPodAccessor(lister, m.Namespace, m.Name)
		return heldScraper{
			inner:   knmetrics.NewStatsScraper(m, m.Name, acc, false, netcfg.MeshCompatibilityModeAuto, log, noopMeters),
			release: f.release,
		}, nil
	}
	f.coll = knmetrics.NewMetricCollector(scrapers, f.log)
	factory := func(d *scaling.Decider) (scaling.UniScaler, error) {
		rev := d.Name
		s := scaling.New(knAttrs(d.Namespace, rev), noopMeters, d.Namespace, rev, f.coll,
			givenCount{ready: 1, accessor: resources.NewPodAccessor(lister, d.Namespace, rev)}, &d.Spec)
		inner[types.NamespacedName{Namespace: d.Namespace, Name: d.Name}] = s
		return heldScaler{inner: s, release: f.release}, nil
	}
	f.multi = scaling.NewMultiScaler(f.stop, factory, f.log)

	ctx := context.Background()
	for i := range n {
		ns, rev := fleetName(i)
		if err := f.coll.CreateOrUpdate(knMetric(ns, rev)); err != nil {
			b.Fatal(err)
		}
		d := &scaling.Decider{Spec: spec}
		d.Namespace, d.Name, d.Labels = ns, rev, revisionLabels(rev)
		if _, err := f.multi.Create(ctx, d); err != nil {
			b.Fatal(err)
		}
		key := types.NamespacedName{Namespace: ns, Name: rev}
		c := fleetConcurrency(i)
		for s := range filled {
			f.coll.Record(key, at(float64(s)+0.5), knmetrics.Stat{AverageConcurrentRequests: c})
		}
		f.revs[i] = knRevision{key: key, scaler: inner[key], status: scaling.DeciderStatus{DesiredScale: -1}}
	}
	after := snapshot()
	b.Cleanup(f.close)
	return f, before, after
}

// record adds one stat per revision at second s + 0.5, as the collection's
// scrape would.
func (f *knFleet) record(s int) {
	for i := range f.revs {
		f.coll.Record(f.revs[i].key, at(float64(s)+0.5), knmetrics.Stat{AverageConcurrentRequests: fleetConcurrency(i)})
	}
}

// tick is what every runner goroutine does on its 2 s tick, done for all
// revisions in turn: Scale, then the decider-status update, which reports a
// changed desired scale or a flipped sign of the excess burst capacity
// (scaling/multiscaler.go updateLatestScale, v0.50.0).
func (f *knFleet) tick(now time.Time) (informed int) {
	for i := range f.revs {
		r := &f.revs[i]
		sr := r.scaler.Scale(f.log, now)
		if !sr.ScaleValid {
			continue
		}
		changed := r.status.DesiredScale != sr.DesiredPodCount ||
			(r.status.ExcessBurstCapacity < 0) != (sr.ExcessBurstCapacity < 0)
		r.status = scaling.DeciderStatus{DesiredScale: sr.DesiredPodCount, ExcessBurstCapacity: sr.ExcessBurstCapacity}
		if changed {
			informed++
		}
	}
	return informed
}

func (f *knFleet) close() {
	close(f.release)
	close(f.stop)
	for i := range f.revs {
		f.coll.Delete(f.revs[i].key.Namespace, f.revs[i].key.Name)
	}
	f.revs = nil
	// The runner goroutines end on their own after stop closes: wait for
	// them, so that the next benchmark's goroutine and stack counts start
	// from the same place.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > f.goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// tidalFleet is tidal's decider engine over the same N targets, fed the same
// stats: one sample per target per second, ticked every 2 s.
type tidalFleet struct {
	e       *engine.Engine
	targets []engine.Target
}

func newTidalFleet(b *testing.B, n int) (*tidalFleet, memSnapshot, memSnapshot) {
	b.Helper()
	f := &tidalFleet{targets: make([]engine.Target, n)}
	for i := range n {
		ns, rev := fleetName(i)
		f.targets[i] = engine.Target{Namespace: ns, Name: rev}
	}
	before := snapshot()
	f.e = engine.New(engine.Config{KPA: kpaconfig.Default(), Deployment: kpaconfig.DefaultDeployment(), TickInterval: 2 * time.Second})
	for _, t := range f.targets {
		if err := f.e.Upsert(engine.Spec{Target: t, Strategy: engine.KPA, Reachable: true}, epoch); err != nil {
			b.Fatal(err)
		}
	}
	for s := range filled {
		f.record(b, s)
		if s%2 == 1 {
			f.e.Tick(at(float64(s + 1)))
		}
	}
	after := snapshot()
	return f, before, after
}

func (f *tidalFleet) record(b *testing.B, s int) {
	t := at(float64(s) + 0.5)
	for i, tg := range f.targets {
		smp := engine.Sample{At: t, Stat: kpa.Stat{AverageConcurrentRequests: fleetConcurrency(i)}, ReadyPods: 1}
		if _, err := f.e.Record(tg, smp, t); err != nil {
			b.Fatal(err)
		}
	}
}

// fleetSizes are the tick benchmark's target counts.
var fleetSizes = []int{10_000, 100_000}

// BenchmarkTick times one 2 s decision tick over N targets holding full
// windows: Knative's Scale plus decider-status update for every revision,
// against tidal's decider/engine Tick. Each op is one tick period: the two
// new stats per target are recorded first (untimed in tick-ms, included in
// ns/op), then the tick at the next grid time. tidal applies its pending
// samples to the windows inside Tick, Knative in Record, so tick-ms favours
// Knative and ns/op (period-cpu-ms in CPU) is the like-for-like total. The ready count is given to
// both. Both report the heap and stacks their state costs per target.
func BenchmarkTick(b *testing.B) {
	for _, n := range fleetSizes {
		b.Run(fmt.Sprintf("%d/knative", n), func(b *testing.B) {
			f, before, after := newKnFleet(b, n)
			f.tick(at(filled))
			if got := f.revs[0].status.DesiredScale; got != 1 {
				b.Fatalf("knative rev-0: desired %d, want 1", got)
			}
			runTicks(b, n, func(s int) { f.record(s) }, func(now time.Time) { f.tick(now) })
			if got := f.revs[n-1].status.DesiredScale; got != 1 {
				b.Fatalf("knative rev-%d: desired %d, want 1", n-1, got)
			}
			reportMem(b, before, after, n)
		})
		b.Run(fmt.Sprintf("%d/tidal", n), func(b *testing.B) {
			f, before, after := newTidalFleet(b, n)
			runTicks(b, n, func(s int) { f.record(b, s) }, func(now time.Time) { f.e.Tick(now) })
			for _, tg := range []engine.Target{f.targets[0], f.targets[n-1]} {
				if d, _ := f.e.Get(tg); d.Desired != 1 {
					b.Fatalf("tidal %s: desired %d, want 1", tg.Key(), d.Desired)
				}
			}
			reportMem(b, before, after, n)
		})
	}
}

// runTicks runs tick periods after the filled history: record two seconds of
// stats, then tick at the next even second.
func runTicks(b *testing.B, n int, record func(s int), tick func(now time.Time)) {
	s := filled
	period := func() (wall, cpu time.Duration) {
		record(s)
		record(s + 1)
		s += 2
		w0, c0 := time.Now(), processCPU(b)
		tick(at(float64(s)))
		return time.Since(w0), processCPU(b) - c0
	}
	period() // warm: the first tick after the fill
	var wall, cpu time.Duration
	ops := 0
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		w, c := period()
		wall += w
		cpu += c
		ops++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e6/float64(ops), "period-cpu-ms")
	b.ReportMetric(float64(wall.Nanoseconds())/1e6/float64(ops), "tick-ms")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e6/float64(ops), "tick-cpu-ms")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(ops)/float64(n), "tick-ns/target")
}

// BenchmarkHeap builds each side's whole decision state for 10,000 targets
// with full windows and reports what it costs per target after GC: heap
// (HeapAlloc) and goroutine stacks (StackInuse). Knative: MultiScaler and
// MetricCollector (collections with their windows and scrapers, runners with
// their decider copies, loggers, tickers and goroutines), and the Metric
// object each collection points to (shared with the informer in
// production). tidal: decider/engine. The loop itself does nothing.
func BenchmarkHeap(b *testing.B) {
	const n = 10_000
	b.Run(fmt.Sprintf("%d/knative", n), func(b *testing.B) {
		_, before, after := newKnFleet(b, n)
		for b.Loop() {
		}
		reportMem(b, before, after, n)
		b.ReportMetric(0, "ns/op") // nothing timed
	})
	b.Run(fmt.Sprintf("%d/tidal", n), func(b *testing.B) {
		_, before, after := newTidalFleet(b, n)
		for b.Loop() {
		}
		reportMem(b, before, after, n)
		b.ReportMetric(0, "ns/op") // nothing timed
	})
}
