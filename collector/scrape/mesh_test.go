package scrape

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidalscale/tidal/collector/queuestat"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// meshScene is a target of four old pods serving concurrency 3 each, and a
// Service in front of them that hands each new connection to the next pod
// (round-robin, as kube-proxy spreads connections). While refuse is set the
// pods answer a direct request with 503, as a mesh's sidecar refuses plain
// traffic; the Service reaches them unless serviceDown is set.
type meshScene struct {
	src         *fakePods
	service     string
	refuse      atomic.Bool
	serviceDown atomic.Bool
	// direct and viaService count the requests each path answered, refused
	// the direct ones refused.
	direct, viaService, refused atomic.Int32
}

func newMeshScene(t *testing.T, young bool) *meshScene {
	t.Helper()
	m := &meshScene{src: &fakePods{ready: map[string]bool{}}}
	start, uptime := time.Now().Add(-time.Hour), float64(3600)
	if young {
		start, uptime = time.Now(), 1
	}
	var stats []http.HandlerFunc
	for _, name := range []string{"pod-a", "pod-b", "pod-c", "pod-d"} {
		h := statHandler(queuestat.Stat{PodName: name, AverageConcurrentRequests: 3, RequestCount: 1, ProcessUptime: uptime})
		stats = append(stats, h)
		addr := servePod(t, func(w http.ResponseWriter, r *http.Request) {
			if m.refuse.Load() {
				m.refused.Add(1)
				http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
				return
			}
			m.direct.Add(1)
			h(w, r)
		})
		m.src.pods = append(m.src.pods, Pod{Name: name, Addr: addr, Start: start})
		m.src.ready[name] = true
	}
	var next atomic.Int32
	m.service = servePod(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Connection") != "close" {
			http.Error(w, "a scrape through the Service must ask for a new connection each time", http.StatusBadRequest)
			return
		}
		if m.serviceDown.Load() {
			http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
			return
		}
		m.viaService.Add(1)
		stats[int(next.Add(1))%len(stats)](w, r)
	})
	return m
}

// TestScrapeMeshModes follows config-network's mesh-compatibility-mode as
// Knative's scraper does: disabled reads the pods and never the Service;
// enabled reads the Service alone, each place of the sample a pod not read
// before; auto reads the pods until every one refuses as a mesh does, then
// the Service in that same scrape, and only the Service from then on.
func TestScrapeMeshModes(t *testing.T) {
	const total = 4 * 3 // four pods at concurrency 3
	for _, tc := range []struct {
		name   string
		mesh   Mesh
		refuse bool
		young  bool
		// per scrape: whether it records a sample, and which path answered
		want []string
	}{
		{"disabled reads the pods", MeshDisabled, false, false, []string{"pods", "pods"}},
		{"disabled under a mesh fails", MeshDisabled, true, false, []string{"fail", "fail"}},
		{"enabled reads the Service", MeshEnabled, false, false, []string{"service", "service"}},
		{"enabled with young pods only", MeshEnabled, false, true, []string{"service"}},
		{"auto without a mesh stays on the pods", MeshAuto, false, false, []string{"pods", "pods", "pods"}},
		{"auto falls back under a mesh", MeshAuto, true, false, []string{"service", "service", "service"}},
		{"auto falls back to young pods", MeshAuto, true, true, []string{"service", "service"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeshScene(t, tc.young)
			m.refuse.Store(tc.refuse)
			rec := &recorder{}
			s, _ := startScraper(t, defaultConfig(t), rec)
			tgt := testTarget(m.src, Format{})
			tgt.Service, tgt.Mesh = m.service, tc.mesh
			s.Set(tgt)
			for i, want := range tc.want {
				direct, via := m.direct.Load(), m.viaService.Load()
				s.ScrapeNow(context.Background())
				samples, _ := rec.take()
				got := "fail"
				switch {
				case len(samples) == 1 && m.direct.Load() > direct && m.viaService.Load() == via:
					got = "pods"
				case len(samples) == 1 && m.viaService.Load() > via && m.direct.Load() == direct:
					got = "service"
				case len(samples) > 0:
					got = "mixed"
				}
				if got != want {
					t.Fatalf("scrape %d: %s, want %s", i, got, want)
				}
				if got != "fail" && samples[0].GetAverageConcurrency() != total {
					t.Errorf("scrape %d: concurrency %v, want %v: four distinct pods read", i, samples[0].GetAverageConcurrency(), total)
				}
			}
		})
	}
}

// TestScrapeMeshAutoStaysOnPodsAfterOtherErrors: auto falls back only when
// every pod refused as a mesh does; a pod that is down is not a mesh.
func TestScrapeMeshAutoStaysOnPodsAfterOtherErrors(t *testing.T) {
	m := newMeshScene(t, false)
	m.refuse.Store(true)
	m.src.pods[0].Addr = "127.0.0.1:1" // refused: not a mesh's answer
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	tgt := testTarget(m.src, Format{})
	tgt.Service, tgt.Mesh = m.service, MeshAuto
	s.Set(tgt)
	for range 2 {
		s.ScrapeNow(context.Background())
	}
	if n := m.viaService.Load(); n != 0 {
		t.Errorf("the Service was read %d times, want none", n)
	}
}

// TestScrapeMeshAutoServiceDown: under a mesh whose Service does not answer
// either, each scrape fails, and each tries the pods first and then the
// Service again (Knative keeps scraping pods first until the Service has
// answered once); once the Service answers, the same scrape records and the
// pods are never asked again.
func TestScrapeMeshAutoServiceDown(t *testing.T) {
	m := newMeshScene(t, false)
	m.refuse.Store(true)
	m.serviceDown.Store(true)
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	tgt := testTarget(m.src, Format{})
	tgt.Service, tgt.Mesh = m.service, MeshAuto
	s.Set(tgt)
	for i := range 2 {
		refused := m.refused.Load()
		s.ScrapeNow(context.Background())
		samples, failures := rec.take()
		if len(samples) != 0 || !slices.ContainsFunc(failures, func(f Failure) bool { return f.Reason == ReasonSample }) {
			t.Fatalf("scrape %d: %d samples, failures %+v; want none and a failed sample", i, len(samples), failures)
		}
		if m.refused.Load()-refused != 4 {
			t.Fatalf("scrape %d: %d pods asked directly, want all 4", i, m.refused.Load()-refused)
		}
	}
	m.serviceDown.Store(false)
	refused := m.refused.Load()
	s.ScrapeNow(context.Background())
	if samples, failures := rec.take(); len(samples) != 1 || samples[0].GetAverageConcurrency() != 12 {
		t.Fatalf("once the Service answers: samples %v, failures %+v; want one at concurrency 12", samples, failures)
	}
	if m.refused.Load() == refused {
		t.Fatal("the scrape did not ask the pods first")
	}
	refused = m.refused.Load()
	for range 2 {
		s.ScrapeNow(context.Background())
	}
	if samples, _ := rec.take(); len(samples) != 2 || m.refused.Load() != refused {
		t.Errorf("after the Service answered: %d samples, pods asked %d times; want 2 samples, the pods never asked", len(samples), m.refused.Load()-refused)
	}
}

// TestScrapeMeshFallbackQueueFull: the fallback places that find the job
// queue full are read by the worker that falls back, so one worker and a
// queue of four still fill a sample of four through the Service.
func TestScrapeMeshFallbackQueueFull(t *testing.T) {
	m := newMeshScene(t, false)
	m.refuse.Store(true)
	cfg := defaultConfig(t)
	cfg.Workers = 1
	rec := &recorder{}
	s, _ := startScraper(t, cfg, rec)
	for i := range 3 {
		tgt := testTarget(m.src, Format{})
		tgt.Ref = &commonv1.TargetRef{Namespace: "ns", Name: fmt.Sprintf("mesh-%d", i)}
		tgt.Service, tgt.Mesh = m.service, MeshAuto
		s.Set(tgt)
	}
	s.ScrapeNow(context.Background())
	samples, _ := rec.take()
	if len(samples) != 3 {
		t.Fatalf("%d samples, want one for each of the 3 targets", len(samples))
	}
	for _, sm := range samples {
		if sm.GetAverageConcurrency() != 12 {
			t.Errorf("concurrency %v, want 12", sm.GetAverageConcurrency())
		}
	}
}

// TestScrapeDirectLB: with a pod Host (config-network's
// enable-mesh-pod-addressability) each pod is asked at its address with
// that Host and Knative-Direct-Lb: true, as a mesh with pod addressability
// passes through; under MeshAuto a scrape whose pods all refuse never falls
// back to the Service (Knative's usePassthroughLb).
func TestScrapeDirectLB(t *testing.T) {
	m := newMeshScene(t, false)
	var headers atomic.Int32
	for i, p := range m.src.pods {
		h := statHandler(queuestat.Stat{PodName: p.Name, AverageConcurrentRequests: 3, ProcessUptime: 3600})
		m.src.pods[i].Addr = servePod(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Host != "rev-private.ns" || r.Header.Get("Knative-Direct-Lb") != "true" {
				http.Error(w, "no route", http.StatusServiceUnavailable)
				return
			}
			headers.Add(1)
			if m.refuse.Load() {
				http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
				return
			}
			h(w, r)
		})
	}
	rec := &recorder{}
	s, _ := startScraper(t, defaultConfig(t), rec)
	tgt := testTarget(m.src, Format{})
	tgt.Service, tgt.Mesh, tgt.PodHost = m.service, MeshAuto, "rev-private.ns"
	s.Set(tgt)
	s.ScrapeNow(context.Background())
	if samples, failures := rec.take(); len(samples) != 1 || samples[0].GetAverageConcurrency() != 12 || headers.Load() != 4 {
		t.Fatalf("samples %v, failures %+v, %d requests with the Host and header; want one at concurrency 12 from 4", samples, failures, headers.Load())
	}
	m.refuse.Store(true)
	for range 2 {
		s.ScrapeNow(context.Background())
	}
	if samples, _ := rec.take(); len(samples) != 0 || m.viaService.Load() != 0 {
		t.Errorf("pods refusing: %d samples, the Service read %d times; want none, no fallback", len(samples), m.viaService.Load())
	}
}
