package benchknative

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	autoscalingv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	knmetrics "knative.dev/serving/pkg/autoscaler/metrics"
	"knative.dev/serving/pkg/autoscaler/scaling"
	"knative.dev/serving/pkg/resources"

	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/decider/kpa"
)

// decisionCase is one revision's load history: concurrency c(s) at second s.
type decisionCase struct {
	name      string
	c         func(s int) float64
	want      int32
	panicking bool
}

var decisionCases = []decisionCase{
	// 300 on 5 pods of 70: stable and panic demand are 5, no panic.
	{"steady", func(int) float64 { return 300 }, 5, false},
	// The last 6 s at 1,000: 15 pods of demand on 5, three times the
	// threshold; stable demand 6, decision 15.
	{"panic", func(s int) float64 {
		if s >= filled-6 {
			return 1000
		}
		return 300
	}, 15, true},
}

const decisionNS, decisionRev = "bench", "hello-00001"

// BenchmarkDecision times one KPA decision for a revision with 5 ready pods
// after three stable windows of data, Knative's autoscaler Scale against
// tidal's decider/kpa Autoscaler.Scale on the same history.
//
// given: the ready count is handed to both (Knative through a pod counter
// that returns 5).
//
// counted: each side counts the ready pods as it does in production.
// Knative's Scale lists the namespace's pods through the PodAccessor of the
// autoscaler binary. tidal counts in the collector: the scraper sends the
// length of the target's ready-pod list with each sample. knative-lister vs
// tidal is that list rebuilt from the lister on every decision (what it costs
// after any pod event in the namespace); tidal-cached is the steady state,
// where no pod changed and the list is reused.
func BenchmarkDecision(b *testing.B) {
	spec := knDeciderSpec(b)
	tspec := tidalSpec(b)
	log := knLogger().Sugar().With("knative.dev/key", decisionNS+"/"+decisionRev)
	now := at(filled)

	// Five ready pods in the revision's namespace, as Knative's harness had.
	idx := podIndexer()
	for i := range 5 {
		if err := idx.Add(readyPod(decisionNS, decisionRev, i, fmt.Sprintf("10.1.0.%d", i+1), epoch.Add(-10*time.Minute))); err != nil {
			b.Fatal(err)
		}
	}
	lister := corelisters.NewPodLister(idx)

	for _, tc := range decisionCases {
		knScale := func(b *testing.B, counter resources.EndpointsCounter) {
			release := make(chan struct{})
			coll := knmetrics.NewMetricCollector(func(*autoscalingv1alpha1.Metric, *zap.SugaredLogger) (knmetrics.StatsScraper, error) {
				return heldScraper{release: release}, nil
			}, log)
			key := types.NamespacedName{Namespace: decisionNS, Name: decisionRev}
			if err := coll.CreateOrUpdate(knMetric(decisionNS, decisionRev)); err != nil {
				b.Fatal(err)
			}
			defer func() {
				close(release) // first: Delete waits for the parked scrape goroutine
				coll.Delete(decisionNS, decisionRev)
			}()
			for s := range filled {
				coll.Record(key, at(float64(s)+0.5), knmetrics.Stat{AverageConcurrentRequests: tc.c(s)})
			}
			sp := spec
			a := scaling.New(knAttrs(decisionNS, decisionRev), noopMeters, decisionNS, decisionRev, coll, counter, &sp)
			for range 3 {
				a.Scale(log, now)
			}
			if r := a.Scale(log, now); !r.ScaleValid || r.DesiredPodCount != tc.want {
				b.Fatalf("knative: %+v, want desired %d", r, tc.want)
			}
			loopCPU(b, func() { a.Scale(log, now) })
		}
		newTidal := func(b *testing.B) *kpa.Autoscaler {
			a, err := kpa.New(tspec, epoch, 5)
			if err != nil {
				b.Fatal(err)
			}
			for s := range filled {
				t := at(float64(s) + 0.5)
				if _, _, err := a.Record(t, t, kpa.Stat{AverageConcurrentRequests: tc.c(s)}, kpa.SourceScraper); err != nil {
					b.Fatal(err)
				}
			}
			for range 3 {
				a.Scale(now, 5, kpa.TriggerTick)
			}
			if d, _ := a.Scale(now, 5, kpa.TriggerTick); d.Desired != tc.want || d.Panicking != tc.panicking {
				b.Fatalf("tidal: desired %d panicking %v, want %d %v", d.Desired, d.Panicking, tc.want, tc.panicking)
			}
			return a
		}

		b.Run(tc.name+"/given/knative", func(b *testing.B) {
			knScale(b, givenCount{ready: 5})
		})
		b.Run(tc.name+"/given/tidal", func(b *testing.B) {
			a := newTidal(b)
			loopCPU(b, func() { a.Scale(now, 5, kpa.TriggerTick) })
		})
		if tc.name != "steady" {
			continue
		}
		b.Run(tc.name+"/counted/knative", func(b *testing.B) {
			knScale(b, resources.NewPodAccessor(lister, decisionNS, decisionRev))
		})
		// One version counter per namespace, bumped by pod events in
		// tidal's collector; bumping it on every decision forces a rebuild.
		b.Run(tc.name+"/counted/tidal", func(b *testing.B) {
			a := newTidal(b)
			var version atomic.Uint64
			src := newPodSource(lister, decisionNS, decisionRev, 9090, &version)
			var buf []scrape.Pod
			loopCPU(b, func() {
				version.Add(1)
				buf = src.ReadyPods(buf[:0])
				a.Scale(now, int32(len(buf)), kpa.TriggerTick)
			})
		})
		b.Run(tc.name+"/counted/tidal-cached", func(b *testing.B) {
			a := newTidal(b)
			var version atomic.Uint64
			src := newPodSource(lister, decisionNS, decisionRev, 9090, &version)
			var buf []scrape.Pod
			loopCPU(b, func() {
				buf = src.ReadyPods(buf[:0])
				a.Scale(now, int32(len(buf)), kpa.TriggerTick)
			})
		})
	}
}

// loopCPU times op and reports, beside the wall time, the process CPU time
// per op: on a shared machine a benchmark that is descheduled loses wall
// time but no CPU time, so cpu-ns/op is the steadier figure.
func loopCPU(b *testing.B, op func()) {
	b.ReportAllocs()
	cpu0, ops := processCPU(b), 0
	for b.Loop() {
		op()
		ops++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(ops), "cpu-ns/op")
}
