package scale

import (
	"math"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KPATargets = 1000
	targets := plan(cfg)
	switching := 0
	for _, k := range targets {
		if k.low < int32(cfg.MinPods) || k.high > int32(cfg.MaxPods) || k.low >= k.high {
			t.Fatalf("%s: levels %d and %d, want %d <= low < high <= %d", k.name, k.low, k.high, cfg.MinPods, cfg.MaxPods)
		}
		for _, n := range []int32{k.low, k.high} {
			if got := int32(math.Ceil(concurrency(n) / perPodTarget())); got != n {
				t.Errorf("ceil(concurrency(%d) / %v) = %d, want %d", n, perPodTarget(), got, n)
			}
		}
		if k.switching {
			switching++
			if k.offset < 0 || k.offset >= cfg.SwitchPeriod {
				t.Errorf("%s: offset %v, want within the period %v", k.name, k.offset, cfg.SwitchPeriod)
			}
		}
	}
	if got, want := switching, 200; got != want {
		t.Errorf("switching targets = %d, want %d", got, want)
	}
}

func TestResults(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := newRecorder()
	r.addKPA("a", t0, 2, true)
	r.kpa["a"].replicas = 2
	// Up 2 → 4 at 10 s: a stray move down first, then up at 14 s, 4 at 16 s.
	r.switched("a", at(10), 2, 4)
	r.kpa["a"].moves = []move{{at(11), 2, 1}, {at(14), 1, 3}, {at(16), 3, 4}}
	r.kpa["a"].replicas = 4
	// Down 4 → 2 at 40 s: never applied.
	r.switched("a", at(40), 4, 2)
	// Up 2 → 4 at 70 s when spec.replicas is still 4.
	r.switched("a", at(70), 2, 4)

	res := r.results(at(100))
	if len(res) != 3 {
		t.Fatalf("results = %d, want 3", len(res))
	}
	if got, want := res[0].firstMove.Sub(res[0].change.at), 4*time.Second; got != want {
		t.Errorf("first change: first move after %v, want %v", got, want)
	}
	if got, want := res[0].reached.Sub(res[0].change.at), 6*time.Second; got != want {
		t.Errorf("first change: reached after %v, want %v", got, want)
	}
	if !res[1].firstMove.IsZero() || res[1].already {
		t.Errorf("second change: %+v, want lost", res[1])
	}
	if !res[2].already {
		t.Errorf("third change: %+v, want already at the new count", res[2])
	}
	var rep Report
	rep.changes(res)
	if rep.Changes != 2 || rep.Lost != 1 || rep.Already != 1 || rep.MoveMax != 4*time.Second {
		t.Errorf("report: changes %d lost %d already %d max %v, want 2, 1, 1, 4s", rep.Changes, rep.Lost, rep.Already, rep.MoveMax)
	}
}

func TestMetricValues(t *testing.T) {
	text := []byte(`# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",group="apps",resource="deployments",scope="resource",subresource="scale",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",group="apps",resource="deployments",scope="resource",subresource="scale",verb="PUT",version="v1"} 2
apiserver_request_total_other{verb="PUT"} 100
go_goroutines 42
`)
	got := metricValues(text, "apiserver_request_total", "verb")
	if got["PUT"] != 9 || got["LIST"] != 3 || len(got) != 2 {
		t.Errorf("by verb = %v, want PUT 9, LIST 3", got)
	}
	if g := metricValues(text, "go_goroutines", "")[""]; g != 42 {
		t.Errorf("go_goroutines = %v, want 42", g)
	}
}
