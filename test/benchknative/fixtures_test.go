package benchknative

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	corelisters "k8s.io/client-go/listers/core/v1"
	autoscalingv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	"knative.dev/serving/pkg/apis/serving"
	knconfig "knative.dev/serving/pkg/autoscaler/config"
	knmetrics "knative.dev/serving/pkg/autoscaler/metrics"
	"knative.dev/serving/pkg/autoscaler/scaling"
	servingmetrics "knative.dev/serving/pkg/metrics"
	"knative.dev/serving/pkg/resources"

	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/pods"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// epoch is time zero of every simulated timeline: a whole multiple of the
// 2 s tick, so tidal's Unix-aligned tick grid falls on whole seconds.
var epoch = time.Unix(1_700_000_000, 0)

// at returns epoch + s seconds.
func at(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }

// filled is how many seconds of one-stat-per-second data every window holds
// before a decision is timed: three 60 s stable windows.
const filled = 180

// knLogger is shaped like Knative's default logging config: a JSON core at
// level info, here writing to io.Discard. tidal's scraper gets the same core.
func knLogger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel))
}

// knDeciderSpec is the DeciderSpec Knative's reconciler derives from the
// default config-autoscaler for a revision with containerConcurrency 0
// (pkg/reconciler/autoscaling/kpa/resources/decider.go, v0.50.0): target
// 100 × 0.7, total 100, TBC 211, panic at 200 %, 60 s stable window.
func knDeciderSpec(tb testing.TB) scaling.DeciderSpec {
	tb.Helper()
	cfg, err := knconfig.NewConfigFromMap(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return scaling.DeciderSpec{
		MaxScaleUpRate:      cfg.MaxScaleUpRate,
		MaxScaleDownRate:    cfg.MaxScaleDownRate,
		ScalingMetric:       "concurrency",
		TargetValue:         cfg.ContainerConcurrencyTargetDefault * cfg.ContainerConcurrencyTargetFraction,
		TotalValue:          cfg.ContainerConcurrencyTargetDefault,
		TargetBurstCapacity: cfg.TargetBurstCapacity,
		ActivatorCapacity:   cfg.ActivatorCapacity,
		PanicThreshold:      cfg.PanicThresholdPercentage / 100,
		StableWindow:        cfg.StableWindow,
		ScaleDownDelay:      cfg.ScaleDownDelay,
		InitialScale:        cfg.InitialScale,
		Reachable:           true,
	}
}

// tidalSpec is the same revision's spec resolved by tidal's kpaconfig.
func tidalSpec(tb testing.TB) kpa.Spec {
	tb.Helper()
	rev, err := kpaconfig.NewRevision(kpaconfig.Default(), kpaconfig.DefaultDeployment(), nil, 0, true)
	if err != nil {
		tb.Fatal(err)
	}
	return rev.DeciderSpec()
}

// knMetric is the Metric Knative's reconciler writes for a revision: the
// default 60 s and 6 s windows and the revision's private service as the
// scrape target.
func knMetric(ns, rev string) *autoscalingv1alpha1.Metric {
	return &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rev, Labels: revisionLabels(rev)},
		Spec: autoscalingv1alpha1.MetricSpec{
			StableWindow: 60 * time.Second,
			PanicWindow:  6 * time.Second,
			ScrapeTarget: rev + "-private",
		},
	}
}

func revisionLabels(rev string) map[string]string {
	return map[string]string{
		serving.RevisionLabelKey:      rev,
		serving.ConfigurationLabelKey: "cfg-" + rev,
		serving.ServiceLabelKey:       "svc-" + rev,
	}
}

// knAttrs are the metric attributes the autoscaler binary's UniScaler
// factory builds for a decider (cmd/autoscaler/main.go, v0.50.0).
func knAttrs(ns, rev string) attribute.Set {
	return attribute.NewSet(
		servingmetrics.ConfigurationNameKey.With("cfg-"+rev),
		servingmetrics.RevisionNameKey.With(rev),
		servingmetrics.ServiceNameKey.With("svc-"+rev),
		servingmetrics.K8sNamespaceKey.With(ns),
	)
}

var noopMeters = noop.NewMeterProvider()

// givenCount is a pod counter that reports a fixed ready count: "the ready
// count given". It keeps the PodAccessor the binary would build, so the heap
// it holds per revision is still counted.
type givenCount struct {
	ready    int
	accessor resources.PodAccessor
}

func (g givenCount) ReadyCount() (int, error)    { return g.ready, nil }
func (g givenCount) NotReadyCount() (int, error) { return 0, nil }

// heldScraper keeps a real stats scraper in a collection but parks the
// collection's 1 s scrape goroutine in its first Scrape until release is
// closed, so the benchmarks see no background ticks (Knative's harness in
// spec/knative-perf.md injected a fake clock for the same purpose).
type heldScraper struct {
	inner   knmetrics.StatsScraper
	release <-chan struct{}
}

func (h heldScraper) Scrape(time.Duration) (knmetrics.Stat, error) {
	<-h.release
	return knmetrics.Stat{}, nil
}

// heldScaler is what the MultiScaler runs for a revision: it parks the
// runner's 2 s ticker goroutine in its first Scale until release is closed.
// The benchmarks call the real scaler, inner, themselves, at simulated times.
type heldScaler struct {
	inner   scaling.UniScaler
	release <-chan struct{}
}

func (h heldScaler) Scale(*zap.SugaredLogger, time.Time) scaling.ScaleResult {
	<-h.release
	return scaling.ScaleResult{}
}
func (h heldScaler) Update(s *scaling.DeciderSpec) { h.inner.Update(s) }
func (h heldScaler) OnDelete()                     { h.inner.OnDelete() }

// podIndexer is what a pod informer gives a lister: an indexer with the
// namespace index.
func podIndexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// readyPod is a realistic ready pod of a revision: labels, Running, the four
// conditions a kubelet sets, an IP and a start time.
func readyPod(ns, rev string, i int, ip string, started time.Time) *corev1.Pod {
	start := metav1.NewTime(started)
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: start}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("%s-deployment-7d9f8c-%05d", rev, i), Labels: revisionLabels(rev),
			CreationTimestamp: start, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady), cond(corev1.PodScheduled)},
			PodIP:      ip, HostIP: "10.0.0.1", StartTime: &start,
		},
	}
}

// podSource is tidal's way of knowing a target's ready pods, as
// collector/targets keeps it (its podSource is unexported, so this is the
// same work written here): the ready pods from the namespace's lister,
// filtered by pods.Ready, rebuilt only when a pod event in the namespace
// bumped version. The scraper reads it once per scrape and sends its length
// as the ready count with the sample, so a decision costs no count.
type podSource struct {
	lister  corelisters.PodNamespaceLister
	sel     labels.Selector
	port    string
	version *atomic.Uint64

	mu     sync.Mutex
	seen   uint64
	primed bool
	pods   []scrape.Pod
}

func newPodSource(l corelisters.PodLister, ns, rev string, port int, version *atomic.Uint64) *podSource {
	return &podSource{
		lister: l.Pods(ns), sel: labels.SelectorFromSet(labels.Set{serving.RevisionLabelKey: rev}),
		port: strconv.Itoa(port), version: version,
	}
}

func (s *podSource) ReadyPods(dst []scrape.Pod) []scrape.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.version.Load(); !s.primed || v != s.seen {
		s.seen, s.primed = v, true
		s.pods = s.pods[:0]
		listed, _ := s.lister.List(s.sel)
		for _, p := range listed {
			if !pods.Ready(p) {
				continue
			}
			start := p.CreationTimestamp.Time
			if p.Status.StartTime != nil {
				start = p.Status.StartTime.Time
			}
			s.pods = append(s.pods, scrape.Pod{Name: p.Name, Addr: net.JoinHostPort(p.Status.PodIP, s.port), Start: start})
		}
	}
	return append(dst, s.pods...)
}

func (s *podSource) IsReady(name string) bool {
	p, err := s.lister.Get(name)
	return err == nil && pods.Ready(p) && s.sel.Matches(labels.Set(p.Labels))
}

// processCPU is the process's user+system CPU time: GC and every goroutine
// included, as Knative's harness measured it.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// memSnapshot is the live heap and goroutine stacks after two forced GCs.
type memSnapshot struct {
	heap, stack uint64
	goroutines  int
}

func snapshot() memSnapshot {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnapshot{heap: ms.HeapAlloc, stack: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// reportMem reports what the state built between before and after costs per
// target.
func reportMem(b *testing.B, before, after memSnapshot, n int) {
	perTarget := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	b.ReportMetric(perTarget(after.heap, before.heap), "heap-B/target")
	stack := perTarget(after.stack, before.stack)
	if after.goroutines <= before.goroutines {
		// No goroutine was added: what StackInuse moved by is the harness's
		// own goroutines (tens of KiB), not the state built.
		stack = 0
	}
	b.ReportMetric(stack, "stack-B/target")
	b.ReportMetric(float64(after.goroutines-before.goroutines)/float64(n), "goroutines/target")
}
