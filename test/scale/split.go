package scale

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tidalscale/tidal/decider/engine"
)

// Dist is a latency over every case measured: P50, P99 and Max are
// nearest-rank over N cases of which Lost never completed, counted as
// infinitely late (a percentile that falls on them is lost, IsLost says
// so). Missing cases lacked a timestamp at one end and are not in N.
type Dist struct {
	N, Lost, Missing int
	P50, P99, Max    time.Duration
}

// lostD marks a percentile that fell on a lost case.
const lostD = time.Duration(math.MaxInt64)

func newDist(ds []time.Duration, lost, missing int) Dist {
	sortDurations(ds)
	d := Dist{N: len(ds) + lost, Lost: lost, Missing: missing}
	at := func(q float64) time.Duration {
		if d.N == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(d.N))) - 1
		i = max(0, min(i, d.N-1))
		if i >= len(ds) {
			return lostD
		}
		return ds[i]
	}
	d.P50, d.P99, d.Max = at(0.5), at(0.99), at(1)
	return d
}

func fmtD(d time.Duration) string {
	if d == lostD {
		return "lost"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func (d Dist) String() string {
	s := fmt.Sprintf("%s / %s / %s (%d", fmtD(d.P50), fmtD(d.P99), fmtD(d.Max), d.N)
	if d.Lost > 0 {
		s += fmt.Sprintf(", %d lost", d.Lost)
	}
	if d.Missing > 0 {
		s += fmt.Sprintf(", %d not seen", d.Missing)
	}
	return s + ")"
}

// Stage is one step of the system's part of a load change's latency.
type Stage struct {
	Name string
	Dist
}

// Split is every load change's latency split into the strategy's own
// delay and what the system added, with the system's part in steps.
type Split struct {
	// Strategy is load change → the tick at which decider/engine, replayed
	// offline on the samples the collector took, first moves the desired
	// scale towards the new level. StrategyNever counts changes it never
	// moves for before the next change (lost for the strategy itself).
	Strategy      Dist
	StrategyNever int
	// System is that tick → spec.replicas first moves (the harness's
	// Deployment informer), over every change the strategy moved for;
	// lost ones count.
	System Dist
	// Stages split System where every timestamp was seen.
	Stages []Stage
}

// Readers is what the run's WatchDecisions and ListDecisions clients saw.
type Readers struct {
	// WatchEnded counts streams the decider ended while the run wanted
	// them; WatchErr is the first such error.
	WatchEnded int
	WatchErr   string
	Received   int
	// Lists completed; ListTime is their latency; ListErrs failed.
	Lists    int
	ListTime Dist
	ListErrs int
	ListErr  string
}

// Unchanged is what happened to the targets whose load never changed,
// from one switch period into the steady phase (when they have converged)
// to its end.
type Unchanged struct {
	Targets int
	// NotAtLevel were not at their level's replicas by then (not
	// converged); the rest are counted below.
	NotAtLevel int
	// Moves are changes of spec.replicas of the converged ones, on Moved
	// targets; Examples name a few.
	Moves, Moved int
	Examples     []string
	// ActuatorWrites are the actuator's writes to their objects (status,
	// scale, Events); ActuatorKinds count them by resource and verb (in
	// PerSec).
	ActuatorWrites int
	ActuatorKinds  []Rate
	// QuietWrites are the actuator's writes to the objects of those whose
	// spec.replicas did not move: decisions that changed nothing (goal:
	// none). The others' moves follow decisions that changed (the
	// decider's, near a level's boundary), each applied.
	QuietWrites int
	// Sampling is what the collector's samples of some of them show.
	Sampling Sampling
}

// Sampling is the scrape samples of the polled targets whose load never
// changed, second by second: a second without one, or with two (which the
// decider's bucket sums), moves a window's average by a whole sample, as
// Knative's does.
type Sampling struct {
	// Targets were polled and converged; Seconds are theirs from then to
	// the end, Missing and Doubled those without a scrape sample or with
	// more than one.
	Targets, Seconds, Missing, Doubled int
	// Moves are their spec.replicas changes, NearGap those with a missing
	// or doubled second in the stable window and tick before.
	Moves, NearGap int
	// RoundsLost and Skipped are the collectors' scrape rounds lost and
	// target scrapes skipped over the whole run (their metrics).
	RoundsLost, Skipped int
}

// maxSteadyPolled bounds the targets whose load never changes that a run
// reads the samples of.
const maxSteadyPolled = 300

// gapReach is how far before a move a missing or doubled second counts for
// it: the stable window of make scale's runs and a tick.
const gapReach = 8 * time.Second

// sampling counts the seconds of the polled unchanged targets from
// converged to end by their scrape samples, and their moves near a gap.
func sampling(rec *recorder, samples map[string][]engine.Sample, unchanged map[string]bool, converged, end time.Time) Sampling {
	var sp Sampling
	from, to := converged.Unix(), end.Unix()
	if to <= from {
		return sp
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for name, ss := range samples {
		if !unchanged[name] {
			continue
		}
		sp.Targets++
		per := make([]int, to-from)
		for _, s := range ss {
			if sec := s.At.Unix(); !s.Activator && !s.ReadyOnly && sec >= from && sec < to {
				per[sec-from]++
			}
		}
		var gaps []int64
		for i, n := range per {
			sp.Seconds++
			if n == 1 {
				continue
			}
			if n == 0 {
				sp.Missing++
			} else {
				sp.Doubled++
			}
			gaps = append(gaps, from+int64(i))
		}
		k := rec.kpa[name]
		if k == nil {
			continue
		}
		for _, m := range k.moves {
			if m.at.Before(converged) || m.at.After(end) {
				continue
			}
			sp.Moves++
			lo := m.at.Add(-gapReach).Unix()
			if slices.ContainsFunc(gaps, func(g int64) bool { return g >= lo && g <= m.at.Unix() }) {
				sp.NearGap++
			}
		}
	}
	return sp
}

// Writes are the API server's writes over the steady phase, from its
// audit log.
type Writes struct {
	// Applied counts the changes of spec.replicas the harness saw (KPA and
	// lag targets).
	Applied int
	// ByAgent are writes per second by client (user agent), ByKind by
	// client, resource and verb; PerChange is writes per applied change by
	// client. ByAgent and PerChange leave out the bucket Leases' renewals,
	// which cost the same with or without changes.
	ByAgent, ByKind []Rate
	PerChange       map[string]float64
	// StatusAfterScale are the actuator's PodAutoscaler status writes
	// made after a scale write of their target since their last one (they
	// report a change), StatusAlone the others (ready pods, conditions,
	// decisions that changed no replicas); StatusAloneBy counts those by
	// what they changed (apiWrite.detail), largest first.
	StatusAfterScale, StatusAlone int
	StatusAloneBy                 []Rate
	Error                         string
}

// ActuatorAgent is the actuator's user agent as the audit log gives it
// (Writes.PerChange's key).
const ActuatorAgent = "tidal-actuator"

const actuatorAgent = ActuatorAgent

// splitInput is what a run collected for the split.
type splitInput struct {
	changes    []changeResult
	strategy   map[string][]liveDecision
	live       map[string][]liveDecision
	writes     []apiWrite
	start, end time.Time
}

// firstToward returns the first decision after t0 and before deadline
// that moves the desired scale up (or down) from the one in force.
func firstToward(ds []liveDecision, t0, deadline time.Time, up bool) (liveDecision, bool) {
	prev := int32(-1)
	for _, d := range ds {
		if !d.tick.After(t0) {
			prev = d.desired
			continue
		}
		if !d.tick.Before(deadline) {
			break
		}
		if prev >= 0 && (d.desired > prev) == up && d.desired != prev {
			return d, true
		}
		prev = d.desired
	}
	return liveDecision{}, false
}

// firstWrite returns the first write of what on name by agent received at
// or after from.
func firstWrite(ws []apiWrite, agent, what, name string, from time.Time) (apiWrite, bool) {
	i := sort.Search(len(ws), func(i int) bool { return !ws[i].received.Before(from) })
	for ; i < len(ws); i++ {
		w := ws[i]
		if w.agent == agent && w.what == what && w.name == name {
			return w, true
		}
	}
	return apiWrite{}, false
}

// split measures every load change.
func (in *splitInput) split() Split {
	var sp Split
	var byStrategy, sys []time.Duration
	sysLost := 0
	type stage struct {
		name string
		ds   []time.Duration
		miss int
	}
	stages := []*stage{
		{name: "strategy's tick → the live decider's tick (later when samples came late)"},
		{name: "live tick → decision seen by a WatchDecisions client"},
		{name: "live tick → actuator's scale write issued (decider's send queue, Scale call, API client)"},
		{name: "scale write issued → done (API server)"},
		{name: "scale write done → Deployment informer"},
	}
	byName := map[string][]apiWrite{}
	for _, w := range in.writes {
		if w.agent == actuatorAgent {
			byName[w.name] = append(byName[w.name], w)
		}
	}
	for _, c := range in.changes {
		if c.already {
			continue
		}
		s, ok := firstToward(in.strategy[c.target], c.change.at, c.deadline, c.up)
		if !ok {
			sp.StrategyNever++
			continue
		}
		byStrategy = append(byStrategy, s.tick.Sub(c.change.at))
		if c.firstMove.IsZero() {
			sysLost++
		} else {
			sys = append(sys, c.firstMove.Sub(s.tick))
		}
		l, okL := firstToward(in.live[c.target], c.change.at, c.deadline, c.up)
		add := func(i int, ok bool, d time.Duration) {
			if ok {
				stages[i].ds = append(stages[i].ds, d)
			} else {
				stages[i].miss++
			}
		}
		add(0, okL, l.tick.Sub(s.tick))
		add(1, okL, l.seen.Sub(l.tick))
		var sc apiWrite
		okSc := false
		if okL {
			sc, okSc = firstWrite(byName[c.target], actuatorAgent, "deployments/scale", c.target, l.tick)
		}
		add(2, okSc, sc.received.Sub(l.tick))
		add(3, okSc, sc.done.Sub(sc.received))
		add(4, okSc && !c.firstMove.IsZero(), c.firstMove.Sub(sc.done))
	}
	sp.Strategy = newDist(byStrategy, sp.StrategyNever, 0)
	sp.System = newDist(sys, sysLost, 0)
	for _, s := range stages {
		sp.Stages = append(sp.Stages, Stage{Name: s.name, Dist: newDist(s.ds, 0, s.miss)})
	}
	return sp
}

// writesOn counts the actuator's writes to the objects named in names
// (a target's Deployment, PodAutoscaler and their Events share its name)
// from start to end, in all and by resource and verb.
func (in *splitInput) writesOn(names map[string]bool, start, end time.Time) (int, []Rate) {
	n, kinds := 0, map[string]int{}
	for _, a := range in.writes {
		if a.received.Before(start) || a.received.After(end) || a.agent != actuatorAgent {
			continue
		}
		name := a.name
		if a.what == "events" {
			name, _, _ = strings.Cut(name, ".") // an Event is named <object>.<suffix>
		}
		if names[name] {
			n++
			kinds[a.what+" "+a.verb+detailOf(a)]++
		}
	}
	return n, byCount(kinds)
}

// detailOf is a's detail as a suffix of its kind, " [detail]", or "".
func detailOf(a apiWrite) string {
	if a.detail == "" {
		return ""
	}
	return " [" + a.detail + "]"
}

// byCount returns counts as Rates, the largest first, at most maxKinds of
// them with the rest summed into "other".
func byCount(counts map[string]int) []Rate {
	const maxKinds = 8
	by := make([]Rate, 0, len(counts))
	for k, c := range counts {
		by = append(by, Rate{k, float64(c)})
	}
	sort.Slice(by, func(i, j int) bool {
		if by[i].PerSec != by[j].PerSec {
			return by[i].PerSec > by[j].PerSec
		}
		return by[i].Key < by[j].Key
	})
	if len(by) > maxKinds {
		other := Rate{Key: "other"}
		for _, r := range by[maxKinds:] {
			other.PerSec += r.PerSec
		}
		by = append(by[:maxKinds], other)
	}
	return by
}

// writeRates counts the writes of the steady phase by client.
func (in *splitInput) writeRates(applied int) Writes {
	w := Writes{Applied: applied, PerChange: map[string]float64{}}
	secs := in.end.Sub(in.start).Seconds()
	agents, kinds := map[string]int{}, map[string]int{}
	scaled := map[string]bool{} // a scale write since the target's last status write
	alone := map[string]int{}
	for _, a := range in.writes {
		if a.received.Before(in.start) || a.received.After(in.end) {
			continue
		}
		if a.agent == actuatorAgent {
			switch a.what {
			case "deployments/scale":
				scaled[a.name] = true
			case "podautoscalers/status":
				if scaled[a.name] {
					w.StatusAfterScale++
				} else {
					w.StatusAlone++
					alone[a.detail]++
				}
				scaled[a.name] = false
			}
		}
		kinds[a.agent+" "+a.what+" "+a.verb]++
		if a.what == "leases" {
			// Bucket Lease renewals: a fixed cost per replica and
			// bucket (busiest shows it), not one per change.
			continue
		}
		agents[a.agent]++
	}
	w.StatusAloneBy = byCount(alone)
	for k, n := range agents {
		w.ByAgent = append(w.ByAgent, Rate{k, float64(n) / secs})
		if applied > 0 {
			w.PerChange[k] = float64(n) / float64(applied)
		}
	}
	for k, n := range kinds {
		w.ByKind = append(w.ByKind, Rate{k, float64(n) / secs})
	}
	sort.Slice(w.ByAgent, func(i, j int) bool { return w.ByAgent[i].PerSec > w.ByAgent[j].PerSec })
	sort.Slice(w.ByKind, func(i, j int) bool { return w.ByKind[i].PerSec > w.ByKind[j].PerSec })
	if len(w.ByKind) > 12 {
		w.ByKind = w.ByKind[:12]
	}
	return w
}

func (s *Split) write(w io.Writer) {
	fmt.Fprintf(w, "load change → strategy decides (replay), p50 / p99 / max: %s\n", s.Strategy)
	fmt.Fprintf(w, "strategy decides → spec.replicas first moves (system-added), p50 / p99 / max: %s\n", s.System)
	for _, st := range s.Stages {
		fmt.Fprintf(w, "  %s: %s\n", st.Name, st.Dist)
	}
}

func (r *Readers) write(w io.Writer) {
	fmt.Fprintf(w, "readers: a WatchDecisions stream per decider got %d decisions, ended by the decider %d times", r.Received, r.WatchEnded)
	if r.WatchErr != "" {
		fmt.Fprintf(w, " (first: %s)", r.WatchErr)
	}
	fmt.Fprintf(w, "; ListDecisions of the namespace every tick: %d listings, p50 / p99 / max %s / %s / %s, %d failed",
		r.Lists, fmtD(r.ListTime.P50), fmtD(r.ListTime.P99), fmtD(r.ListTime.Max), r.ListErrs)
	if r.ListErr != "" {
		fmt.Fprintf(w, " (first: %s)", r.ListErr)
	}
	fmt.Fprintln(w)
}

func (u *Unchanged) write(w io.Writer) {
	fmt.Fprintf(w, "targets whose load never changed: %d (%d not at their level a switch period into the steady phase); from then, spec.replicas of the others moved %d times on %d targets, and the actuator wrote to their objects %d times (%d to those that did not move)",
		u.Targets, u.NotAtLevel, u.Moves, u.Moved, u.ActuatorWrites, u.QuietWrites)
	if len(u.ActuatorKinds) > 0 {
		var parts []string
		for _, k := range u.ActuatorKinds {
			parts = append(parts, fmt.Sprintf("%s %.0f", k.Key, k.PerSec))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	if len(u.Examples) > 0 {
		fmt.Fprintf(w, "; first: %s", strings.Join(u.Examples, "; "))
	}
	fmt.Fprintln(w)
	if sp := u.Sampling; sp.Seconds > 0 {
		fmt.Fprintf(w, "  their scrape samples (%d polled targets, %d target-seconds): %.2f %% of seconds without one, %.2f %% with two or more; %d of their %d moves had such a second in the %s before\n",
			sp.Targets, sp.Seconds, 100*float64(sp.Missing)/float64(sp.Seconds), 100*float64(sp.Doubled)/float64(sp.Seconds), sp.NearGap, sp.Moves, gapReach)
		if sp.RoundsLost < 0 {
			fmt.Fprintln(w, "  the collectors over the run: their metrics could not be read")
		} else {
			fmt.Fprintf(w, "  the collectors over the run: %d scrape rounds lost (more than three intervals late), %d target scrapes skipped (the last still running)\n", sp.RoundsLost, sp.Skipped)
		}
	}
}

func (ws *Writes) write(w io.Writer) {
	if ws.Error != "" {
		fmt.Fprintf(w, "writes by client: not read (%s)\n", ws.Error)
		return
	}
	var parts []string
	for _, a := range ws.ByAgent {
		parts = append(parts, fmt.Sprintf("%s %.1f/s (%.2f per change)", a.Key, a.PerSec, ws.PerChange[a.Key]))
	}
	fmt.Fprintf(w, "writes by client but Lease renewals (audit log), steady phase, %d changes of spec.replicas applied: %s\n", ws.Applied, strings.Join(parts, ", "))
	parts = parts[:0]
	for _, k := range ws.ByKind {
		parts = append(parts, fmt.Sprintf("%s %.1f", k.Key, k.PerSec))
	}
	fmt.Fprintf(w, "busiest writes/s: %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(w, "actuator's status writes: %d after a scale write of their target, %d with none since their last (ready pods, conditions, decisions that moved no replicas)",
		ws.StatusAfterScale, ws.StatusAlone)
	parts = parts[:0]
	for _, k := range ws.StatusAloneBy {
		parts = append(parts, fmt.Sprintf("%s %.0f", cmp.Or(k.Key, "?"), k.PerSec))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "; those by what they changed: %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}
