package scale

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

func TestDistCountsLost(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name          string
		ds            []time.Duration
		lost          int
		p50, p99, max time.Duration
	}{
		{"none", nil, 0, 0, 0, 0},
		{"all measured", []time.Duration{3 * s, 1 * s, 2 * s}, 0, 2 * s, 3 * s, 3 * s},
		{"one lost of four: the max is lost, the median is not", []time.Duration{1 * s, 2 * s, 3 * s}, 1, 2 * s, lostD, lostD},
		{"half lost", []time.Duration{1 * s}, 1, 1 * s, lostD, lostD},
		{"more than half lost", []time.Duration{1 * s}, 2, lostD, lostD, lostD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDist(tc.ds, tc.lost, 0)
			if d.P50 != tc.p50 || d.P99 != tc.p99 || d.Max != tc.max || d.N != len(tc.ds)+tc.lost {
				t.Errorf("newDist = %+v, want p50 %v p99 %v max %v over %d", d, tc.p50, tc.p99, tc.max, len(tc.ds)+tc.lost)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	dec := func(tick float64, seen float64, desired int32) liveDecision {
		return liveDecision{tick: at(tick), seen: at(seen), desired: desired}
	}
	in := splitInput{
		changes: []changeResult{
			// Up from 2 at 10 s; applied at 16.5 s.
			{target: "a", change: loadChange{at: at(10), from: 2, to: 4, replicasAt: 2}, up: true, deadline: at(40), firstMove: at(16.5)},
			// Down at 40 s: the strategy moves at 46 s, nothing is applied.
			{target: "a", change: loadChange{at: at(40), from: 4, to: 2, replicasAt: 4}, deadline: at(70)},
			// Up at 70 s for b: the strategy never moves.
			{target: "b", change: loadChange{at: at(70), from: 1, to: 3, replicasAt: 1}, up: true, deadline: at(100)},
			// Already at the new count: not measured.
			{target: "b", change: loadChange{at: at(100), from: 3, to: 1, replicasAt: 1}, deadline: at(130), already: true},
		},
		strategy: map[string][]liveDecision{
			"a": {dec(0, 0, 2), dec(12, 12, 3), dec(14, 14, 4), dec(46, 46, 2)},
			"b": {dec(0, 0, 1)},
		},
		live: map[string][]liveDecision{
			"a": {dec(0, 0.6, 2), dec(14, 14.6, 4)},
		},
		writes: []apiWrite{
			{agent: actuatorAgent, what: "podautoscalers/status", name: "a", received: at(14.7), done: at(14.8)},
			{agent: actuatorAgent, what: "deployments/scale", name: "a", received: at(15), done: at(16)},
			{agent: "kube-controller-manager", what: "deployments/scale", name: "a", received: at(14.5), done: at(14.6)},
		},
	}
	sp := in.split()
	if sp.StrategyNever != 1 || sp.Strategy.N != 3 || sp.Strategy.Lost != 1 {
		t.Errorf("strategy = %+v, never %d; want 3 changes, 1 never", sp.Strategy, sp.StrategyNever)
	}
	if sp.System.N != 2 || sp.System.Lost != 1 || sp.System.P50 != 4500*time.Millisecond {
		t.Errorf("system = %+v, want 2 changes, 1 lost, p50 4.5 s (12 s → 16.5 s)", sp.System)
	}
	want := []time.Duration{2 * time.Second, 600 * time.Millisecond, time.Second, time.Second, 500 * time.Millisecond}
	for i, st := range sp.Stages {
		if st.N != 1 || st.P50 != want[i] {
			t.Errorf("stage %q = %+v, want one at %v", st.Name, st.Dist, want[i])
		}
	}
}

func TestWriteRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := func(agent, what, name string, s float64) apiWrite {
		return apiWrite{agent: agent, what: what, name: name, received: at(s), done: at(s + 0.1)}
	}
	alone := func(name string, s float64) apiWrite {
		a := w(actuatorAgent, "podautoscalers/status", name, s)
		a.detail = "actualScale" // ready pods changed
		return a
	}
	in := splitInput{start: at(0), end: at(10), writes: []apiWrite{
		w(actuatorAgent, "podautoscalers/status", "a", -1), // before the steady phase
		w(actuatorAgent, "deployments/scale", "a", 1),
		w(actuatorAgent, "deployments/scale", "a", 2),
		w(actuatorAgent, "podautoscalers/status", "a", 3), // reports both changes
		alone("a", 4),
		alone("b", 5),
		w(actuatorAgent, "leases", "bucket-1", 5),
		w("kube-controller-manager", "deployments/status", "a", 6),
	}}
	ws := in.writeRates(2)
	if ws.StatusAfterScale != 1 || ws.StatusAlone != 2 {
		t.Errorf("status writes after a scale write %d, alone %d; want 1, 2", ws.StatusAfterScale, ws.StatusAlone)
	}
	if want := []Rate{{"actualScale", 2}}; !slices.Equal(ws.StatusAloneBy, want) {
		t.Errorf("status writes alone by what they changed = %v, want %v", ws.StatusAloneBy, want)
	}
	if got := ws.PerChange[actuatorAgent]; got != 2.5 {
		t.Errorf("actuator writes per change = %v, want 2.5 (5 writes but the Lease's, 2 changes)", got)
	}
}

func TestSampling(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	every := func(secs ...float64) []engine.Sample {
		var ss []engine.Sample
		for _, s := range secs {
			ss = append(ss, engine.Sample{At: at(s)})
		}
		return ss
	}
	rec := newRecorder()
	rec.kpa["a"] = &kpaLog{moves: []move{{at: at(9.5), from: 4, to: 3}, {at: at(30), from: 3, to: 4}}}
	rec.kpa["b"] = &kpaLog{}
	samples := map[string][]engine.Sample{
		// a misses second 5 and doubles second 7; a pushed stat and a
		// ready-pods change are not scrape samples.
		"a": append(every(0.1, 1.1, 2.1, 3.1, 4.1, 6.1, 7.1, 7.9, 8.1, 9.1),
			engine.Sample{At: at(8.5), Activator: true}, engine.Sample{At: at(9.5), ReadyOnly: true}),
		"b": every(0.2, 1.2, 2.2, 3.2, 4.2, 5.2, 6.2, 7.2, 8.2, 9.2),
		// c changed load: not counted.
		"c": every(1),
	}
	got := sampling(rec, samples, map[string]bool{"a": true, "b": true}, at(0), at(10))
	want := Sampling{Targets: 2, Seconds: 20, Missing: 1, Doubled: 1, Moves: 1, NearGap: 1}
	if got != want {
		t.Errorf("sampling = %+v, want %+v", got, want)
	}
}

func TestReadAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"1","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/scale/deployments/kpa-00001/scale","verb":"patch","user":{"username":"admin"},"userAgent":"tidal-actuator/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"deployments","namespace":"scale","name":"kpa-00001","apiGroup":"apps","apiVersion":"v1","subresource":"scale"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-03T08:00:01.250000Z","stageTimestamp":"2026-12-03T08:00:01.262500Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"2","stage":"ResponseComplete","verb":"create","userAgent":"tidal-actuator/v0.0.0","objectRef":{"resource":"events","namespace":"scale","name":"kpa-00001.1"},"responseStatus":{"code":201},"requestObject":{"kind":"Event","reason":"Scaled","lastTimestamp":"2026-12-03T08:00:01Z"},"requestReceivedTimestamp":"2026-12-03T08:00:01.000000Z","stageTimestamp":"2026-12-03T08:00:01.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"6","stage":"ResponseComplete","verb":"create","userAgent":"tidal-actuator/v0.0.0","objectRef":{"resource":"events","namespace":"scale","name":"kpa-00001.2"},"responseStatus":{"code":201},"requestObject":{"kind":"Event","reason":"Scaled","lastTimestamp":"2026-12-03T08:00:01Z"},"requestReceivedTimestamp":"2026-12-03T08:00:20.000000Z","stageTimestamp":"2026-12-03T08:00:20.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"4","stage":"ResponseComplete","verb":"update","userAgent":"tidal-actuator/v0.0.0","objectRef":{"resource":"podautoscalers","namespace":"scale","name":"kpa-00001","subresource":"status"},"responseStatus":{"code":200},"requestObject":{"status":{"actualScale":1,"lastDecision":{"sequence":1,"desiredScale":2}}},"requestReceivedTimestamp":"2026-12-03T08:00:02.000000Z","stageTimestamp":"2026-12-03T08:00:02.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"5","stage":"ResponseComplete","verb":"update","userAgent":"tidal-actuator/v0.0.0","objectRef":{"resource":"podautoscalers","namespace":"scale","name":"kpa-00001","subresource":"status"},"responseStatus":{"code":200},"requestObject":{"status":{"actualScale":2,"lastDecision":{"sequence":2,"desiredScale":2}}},"requestReceivedTimestamp":"2026-12-03T08:00:03.000000Z","stageTimestamp":"2026-12-03T08:00:03.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"3","stage":"Respon`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := readAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	// The last line, half written, is not read.
	if len(ws) != 5 {
		t.Fatalf("writes = %d, want 5", len(ws))
	}
	// Sorted by the time the API server received them.
	w := ws[1]
	if w.agent != "tidal-actuator" || w.what != "deployments/scale" || w.verb != "patch" || w.name != "kpa-00001" || w.code != 200 ||
		w.done.Sub(w.received) != 12500*time.Microsecond {
		t.Errorf("write = %+v", w)
	}
	if ws[0].what != "events" || ws[0].code != 201 || ws[0].detail != "Scaled" {
		t.Errorf("first write = %+v, want the Scaled Event", ws[0])
	}
	if ws[2].detail != "first" || ws[3].detail != "actualScale lastDecision.sequence" {
		t.Errorf("status writes' details = %q, %q; want first, then what the second changed", ws[2].detail, ws[3].detail)
	}
	if want := "Scaled, sent 10s or more after it happened"; ws[4].detail != want {
		t.Errorf("a late Event's detail = %q, want %q", ws[4].detail, want)
	}
}

func TestStatusChange(t *testing.T) {
	obj := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	cond := func(typ, status, at string) string {
		return `{"type":"` + typ + `","status":"` + status + `","reason":"R","message":"","lastTransitionTime":"` + at + `"}`
	}
	base := `{"actualScale":3,"desiredScale":3,"conditions":[` + cond("Ready", "True", "t0") + `,` + cond("Active", "True", "t0") + `],"lastDecision":{"sequence":10,"desiredScale":3,"reason":"a"}}`
	for _, tc := range []struct {
		name, was, now, want string
	}{
		{"no earlier write", "", base, "first"},
		{"same", base, base, "nothing"},
		{"ready pods", base, strings.Replace(base, `"actualScale":3`, `"actualScale":2`, 1), "actualScale"},
		{"a field appears", `{"desiredScale":3}`, `{"desiredScale":3,"metricName":"m"}`, "metricName"},
		{"a first decision", `{"desiredScale":3}`, `{"desiredScale":3,"lastDecision":{"sequence":1}}`, "lastDecision"},
		{"a decision's record", base, strings.Replace(base, `"sequence":10,"desiredScale":3,"reason":"a"`, `"sequence":11,"desiredScale":3,"reason":"b"`, 1), "lastDecision.reason lastDecision.sequence"},
		{"a condition turns", base, strings.Replace(base, cond("Active", "True", "t0"), cond("Active", "False", "t1"), 1), "conditions.Active"},
		{"a condition only re-stamped", base, strings.Replace(base, cond("Active", "True", "t0"), cond("Active", "True", "t1"), 1), "nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var was map[string]json.RawMessage
			if tc.was != "" {
				was = obj(tc.was)
			}
			if got := statusChange(was, obj(tc.now)); got != tc.want {
				t.Errorf("statusChange = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReplayStrategy: a load that steps from one pod's worth to three's at
// 30 s moves the replayed decision within the stable window, on the tick
// grid.
func TestReplayStrategy(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var ss []engine.Sample
	for i := range 60 {
		c := concurrency(1)
		if i >= 30 {
			c = concurrency(3)
		}
		ss = append(ss, engine.Sample{At: t0.Add(time.Duration(i) * time.Second), ReadyPods: 1, Stat: kpa.Stat{AverageConcurrentRequests: c, RequestCount: c}})
	}
	out, err := replayStrategy(map[string]string{kpaconfig.KeyStableWindow: "6s", kpaconfig.KeyPanicWindowPercentage: "50"}, "ns", map[string][]engine.Sample{"a": ss})
	if err != nil {
		t.Fatal(err)
	}
	ds := out["a"]
	if len(ds) < 2 || ds[0].desired != 1 {
		t.Fatalf("decisions = %+v, want 1 first, then a move", ds)
	}
	d, ok := firstToward(ds, t0.Add(29500*time.Millisecond), t0.Add(time.Minute), true)
	if !ok {
		t.Fatalf("no move up after the step: %+v", ds)
	}
	if lag := d.tick.Sub(t0.Add(30 * time.Second)); lag < 0 || lag > 6*time.Second || d.tick.UnixMilli()%2000 != 0 {
		t.Errorf("moved up at %v (%v after the step), want on the 2 s grid within the 6 s stable window", d.tick, lag)
	}
}
