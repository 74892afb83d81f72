package scale

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidalscale/tidal/services/server"
)

// Report is what a run measured. Durations are zero where nothing was
// measured.
type Report struct {
	Config Config
	// Creation is how long creating every target took.
	Creation time.Duration
	// FirstDecisionAll is from the start of creation until the last KPA
	// target's first decision was recorded (zero when some never were);
	// FirstDecisionP50 and P99 are per target, from its own creation.
	// Undecided KPA targets had none when the steady phase began.
	FirstDecisionAll, FirstDecisionP50, FirstDecisionP99 time.Duration
	Undecided                                            int
	// LagScaledP50 and P99 are from a lag target's creation until its
	// Deployment first had replicas; LagUnscaled never had.
	LagScaledP50, LagScaledP99 time.Duration
	LagUnscaled                int

	// Steady is the length of the steady phase, Pods the simulated pods
	// served at its end, ListenErrors the pod IPs that could not be served.
	Steady       time.Duration
	Pods         int
	ListenErrors int64
	// ListenError is the first of them, nil when none.
	ListenError error

	// Changes are the load changes measured; Already those made when
	// spec.replicas already had the new level's count (not measured); Lost
	// those with no move of spec.replicas towards it before the next.
	Changes, Already, Lost int
	// MoveP50, MoveP99 and MoveMax: load change → first move of
	// spec.replicas towards the new count, over the changes not lost.
	MoveP50, MoveP99, MoveMax time.Duration
	// ReachP50 and ReachP99: load change → spec.replicas equal to the new
	// count; NotReached never got there before the next change.
	ReachP50, ReachP99 time.Duration
	NotReached         int
	// LostExamples name a few lost changes.
	LostExamples []string

	// DecisionAgeP50 and Max: how old decisions were (from the decider's
	// sequence) when a PodAutoscaler's status.lastDecision showed them,
	// over the last 30 s of the steady phase; DecisionsLast30s counts them.
	DecisionAgeP50, DecisionAgeMax time.Duration
	DecisionsLast30s               int

	// Move is load change → spec.replicas first moves over every change
	// measured, the lost ones counted.
	Move Dist
	// Split is the same changes' latency split into the strategy's part
	// and the system's; ReplayError says why the strategy's part is
	// missing or partial.
	Split       Split
	ReplayError string
	// Windows is how the replay's samples were read: window reads, the
	// longest round of them, and windows that did not reach back to the
	// last sample kept (the replay lacks what came between).
	Windows WindowReads
	// FirstSample is a KPA target's first sample (the collector's first
	// scrape of one of its pods) → its first decision, as a watch saw it
	// (the tick lateness and the stream included); FirstTickLate counts
	// the targets whose first decision was not made at the first tick
	// after their first sample (its tick more than one interval later).
	FirstSample   Dist
	FirstTickLate int
	Readers       Readers
	Unchanged     Unchanged
	Writes        Writes

	// ImpliedPods is what the targets' load levels imply at the end of the
	// steady phase (KPA targets); Pods is what was served. A run is at
	// full load when it served them all and decided every target: only
	// then are the services' costs judged against their goals.
	ImpliedPods int

	Procs []ProcReport
	// Requests are the API server's requests per second by verb over the
	// steady phase, from every client (the control plane's own too);
	// RequestsByResource the ten busiest resource and verb pairs.
	Requests, RequestsByResource []Rate
	// RequestsError says why they are missing (the API server's /metrics
	// did not answer).
	RequestsError string
	// OtherCPU is the CPU cores of other processes over the steady phase
	// (PerSec is cores): the harness and the control plane. LoadAverage is
	// the machine's, at the start and end of the steady phase.
	OtherCPU    []Rate
	LoadAverage string
}

// percentile is the q-quantile (nearest rank) of sorted ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func sortDurations(ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
}

func (r *Report) firstDecisions(rec *recorder, createStart time.Time) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var per, lag []time.Duration
	var last time.Time
	for _, k := range rec.kpa {
		if k.firstDecision.IsZero() {
			r.Undecided++
			continue
		}
		per = append(per, k.firstDecision.Sub(k.created))
		if k.firstDecision.After(last) {
			last = k.firstDecision
		}
	}
	for _, l := range rec.lag {
		if l.firstScaled.IsZero() {
			r.LagUnscaled++
			continue
		}
		lag = append(lag, l.firstScaled.Sub(l.created))
	}
	sortDurations(per)
	sortDurations(lag)
	if r.Undecided == 0 {
		r.FirstDecisionAll = last.Sub(createStart)
	}
	r.FirstDecisionP50, r.FirstDecisionP99 = percentile(per, 0.5), percentile(per, 0.99)
	r.LagScaledP50, r.LagScaledP99 = percentile(lag, 0.5), percentile(lag, 0.99)
}

func (r *Report) changes(res []changeResult) {
	var moves, reach []time.Duration
	for _, c := range res {
		if c.already {
			r.Already++
			continue
		}
		r.Changes++
		if c.firstMove.IsZero() {
			r.Lost++
			if len(r.LostExamples) < 5 {
				r.LostExamples = append(r.LostExamples, fmt.Sprintf("%s at %s: %d → %d pods (spec.replicas %d)",
					c.target, c.change.at.Format("15:04:05.000"), c.change.from, c.change.to, c.change.replicasAt))
			}
			continue
		}
		moves = append(moves, c.firstMove.Sub(c.change.at))
		if c.reached.IsZero() {
			r.NotReached++
		} else {
			reach = append(reach, c.reached.Sub(c.change.at))
		}
	}
	r.Move = newDist(append([]time.Duration(nil), moves...), r.Lost, 0)
	sortDurations(moves)
	sortDurations(reach)
	r.MoveP50, r.MoveP99 = percentile(moves, 0.5), percentile(moves, 0.99)
	if len(moves) > 0 {
		r.MoveMax = moves[len(moves)-1]
	}
	r.ReachP50, r.ReachP99 = percentile(reach, 0.5), percentile(reach, 0.99)
}

func (r *Report) decisionAges(rec *recorder, from, to time.Time) {
	rec.mu.Lock()
	var ages []time.Duration
	for _, d := range rec.decisions {
		if !d.at.Before(from) && !d.at.After(to) {
			ages = append(ages, d.age)
		}
	}
	rec.mu.Unlock()
	sortDurations(ages)
	r.DecisionsLast30s = len(ages)
	r.DecisionAgeP50 = percentile(ages, 0.5)
	if len(ages) > 0 {
		r.DecisionAgeMax = ages[len(ages)-1]
	}
}

// secs formats a duration in seconds with one decimal.
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// FirstDecisionLine is the report's line on first decisions.
func (r *Report) FirstDecisionLine() string {
	all := "not all"
	if r.Undecided == 0 {
		all = secs(r.FirstDecisionAll)
	}
	return fmt.Sprintf("%s (per target p50 %s / p99 %s); %d of %d without one",
		all, secs(r.FirstDecisionP50), secs(r.FirstDecisionP99), r.Undecided, r.Config.KPATargets)
}

// Write prints the report as a table.
func (r *Report) Write(w io.Writer) {
	c := r.Config
	memory := "no memory limit"
	if c.MemoryLimit > 0 {
		memory = fmt.Sprintf("a %d MiB container memory limit each (GOMEMLIMIT %d MiB)", c.MemoryLimit>>20, server.SoftMemoryLimit(c.MemoryLimit)>>20)
	}
	nice := ""
	if c.ControlPlaneNice > 0 {
		nice = fmt.Sprintf("; the control plane at nice %d", c.ControlPlaneNice)
	}
	fmt.Fprintf(w, "tidal scale: %d KPA targets (%d–%d pods each) + %d lag targets; %.0f %% of the KPA targets switch load every %s; %d replica(s) of each service, %s; stable window %s%s\n\n",
		c.KPATargets, c.MinPods, c.MaxPods, c.LagTargets, c.SwitchFraction*100, c.SwitchPeriod, c.Replicas, memory, c.StableWindow, nice)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("creation (Deployments, PodAutoscalers, Topics, Functions)", fmt.Sprintf("%s (%.0f targets/s)", secs(r.Creation),
		float64(c.KPATargets+c.LagTargets)/r.Creation.Seconds()))
	row("all KPA targets' first decision recorded", r.FirstDecisionLine())
	if c.LagTargets > 0 {
		row("lag targets scaled from zero, per target p50 / p99", fmt.Sprintf("%s / %s; %d of %d never", secs(r.LagScaledP50), secs(r.LagScaledP99), r.LagUnscaled, c.LagTargets))
	}
	row("steady phase", fmt.Sprintf("%s, %d simulated pods served at the end (%d pod IPs not served)", secs(r.Steady), r.Pods, r.ListenErrors))
	row("load change → spec.replicas first moves, p50 / p99 / max", fmt.Sprintf("%s / %s / %s", secs(r.MoveP50), secs(r.MoveP99), secs(r.MoveMax)))
	row("load change → spec.replicas at the new count, p50 / p99", fmt.Sprintf("%s / %s (%d not there before the next change)", secs(r.ReachP50), secs(r.ReachP99), r.NotReached))
	row("load changes never applied before the next one", fmt.Sprintf("%d / %d (and %d made when spec.replicas already matched)", r.Lost, r.Changes, r.Already))
	row("decision → recorded by the actuator, last 30 s, p50 / max", fmt.Sprintf("%s / %s (%d decisions)", secs(r.DecisionAgeP50), secs(r.DecisionAgeMax), r.DecisionsLast30s))
	_ = tw.Flush()

	fmt.Fprintln(w, "\nEvery load change, lost ones counted as never (p50 / p99 / max over n):")
	fmt.Fprintf(w, "load change → spec.replicas first moves: %s\n", r.Move)
	r.Split.write(w)
	if r.ReplayError != "" {
		fmt.Fprintf(w, "  (replay: %s)\n", r.ReplayError)
	}
	fmt.Fprintf(w, "  (replay's samples: %d window reads, longest round %s, %d windows not reaching back to the last sample kept, %s missed in all)\n",
		r.Windows.Reads, secs(r.Windows.Longest), r.Windows.Gaps, secs(r.Windows.Missed))
	fmt.Fprintf(w, "first sample → first decision seen, per KPA target: %s; %d not decided at the first tick (%s grid) after their first sample\n", r.FirstSample, r.FirstTickLate, kpaTick)
	r.Readers.write(w)
	r.Unchanged.write(w)
	r.Writes.write(w)

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	names := []string{""}
	for _, p := range r.Procs {
		names = append(names, p.Name)
	}
	names = append(names, "all")
	fmt.Fprintln(tw, strings.Join(names, "\t")+"\t")
	var cpu, rss, peak float64
	var g, warn, errs int
	line := func(label string, f func(p ProcReport) string, total string) {
		cells := []string{label}
		for _, p := range r.Procs {
			cells = append(cells, f(p))
		}
		fmt.Fprintln(tw, strings.Join(append(cells, total), "\t")+"\t")
	}
	for _, p := range r.Procs {
		cpu += p.CPUCores
		rss += p.RSSMiB
		peak += p.MaxRSSMiB
		g += p.Goroutines
		warn += p.Warnings
		errs += p.Errors
	}
	line("CPU cores (steady mean)", func(p ProcReport) string { return fmt.Sprintf("%.3f", p.CPUCores) }, fmt.Sprintf("%.3f", cpu))
	line("RSS MiB (end)", func(p ProcReport) string { return fmt.Sprintf("%.0f", p.RSSMiB) }, fmt.Sprintf("%.0f", rss))
	line("RSS MiB (peak; all: sum of peaks)", func(p ProcReport) string { return fmt.Sprintf("%.0f", p.MaxRSSMiB) }, fmt.Sprintf("%.0f", peak))
	line("goroutines (end)", func(p ProcReport) string { return fmt.Sprint(p.Goroutines) }, fmt.Sprint(g))
	line("goroutines (max)", func(p ProcReport) string { return fmt.Sprint(p.MaxGoroutines) }, "")
	line("warn log lines", func(p ProcReport) string { return fmt.Sprint(p.Warnings) }, fmt.Sprint(warn))
	line("error log lines", func(p ProcReport) string { return fmt.Sprint(p.Errors) }, fmt.Sprint(errs))
	_ = tw.Flush()

	r.writeFullLoad(w, cpu, peak)
	for _, o := range r.OtherCPU {
		fmt.Fprintf(w, "CPU cores, %s: %.3f\n", o.Key, o.PerSec)
	}
	fmt.Fprintf(w, "load average (1 min): %s\n", r.LoadAverage)

	fmt.Fprintln(w)
	if r.RequestsError != "" {
		fmt.Fprintf(w, "Kubernetes requests/s: not read (%s)\n", r.RequestsError)
	} else {
		r.writeRequests(w)
	}
	if len(r.LostExamples) > 0 {
		fmt.Fprintf(w, "lost changes, first %d: %s\n", len(r.LostExamples), strings.Join(r.LostExamples, "; "))
	}
	fmt.Fprintln(w, `
"first moves": the first change of spec.replicas after a load change in its direction (towards the new level's
replicas from where spec.replicas was), as a Deployment informer saw it; "lost": none before the target's next
load change (every change has at least one switch period). "decision → recorded": informer time of a
PodAutoscaler status.lastDecision minus the decision's sequence (the decider's time in Unix ms).`)
}

func (r *Report) writeRequests(w io.Writer) {
	var parts []string
	total := 0.0
	for _, q := range r.Requests {
		parts = append(parts, fmt.Sprintf("%s %.1f", q.Key, q.PerSec))
		total += q.PerSec
	}
	fmt.Fprintf(w, "Kubernetes requests/s, all clients, steady phase: %.1f (%s)\n", total, strings.Join(parts, ", "))
	parts = parts[:0]
	for _, q := range r.RequestsByResource {
		parts = append(parts, fmt.Sprintf("%s %.1f", q.Key, q.PerSec))
	}
	fmt.Fprintf(w, "busiest: %s\n", strings.Join(parts, ", "))
}

func (r *Report) firstSamples(rec *recorder, rdr *readers, farm *podFarm) {
	rec.mu.Lock()
	names := make([]string, 0, len(rec.kpa))
	for name := range rec.kpa {
		names = append(names, name)
	}
	rec.mu.Unlock()
	var ds []time.Duration
	missing := 0
	for _, name := range names {
		first, ok1 := farm.FirstScrape(name)
		d, ok2 := rdr.firstDecision(name)
		if !ok1 || !ok2 {
			missing++
			continue
		}
		ds = append(ds, d.seen.Sub(first))
		if d.tick.Sub(first) > kpaTick {
			r.FirstTickLate++
		}
	}
	r.FirstSample = newDist(ds, 0, missing)
}

// kpaTick is the decider's KPA tick interval.
const kpaTick = 2 * time.Second

func (r *Report) readers(rdr *readers) {
	rdr.mu.Lock()
	defer rdr.mu.Unlock()
	r.Readers = Readers{WatchEnded: rdr.watchEnded, Received: rdr.received, Lists: len(rdr.lists), ListErrs: rdr.listErrs,
		ListTime: newDist(append([]time.Duration(nil), rdr.lists...), 0, 0)}
	if rdr.watchErr != nil {
		r.Readers.WatchErr = rdr.watchErr.Error()
	}
	if rdr.listErr != nil {
		r.Readers.ListErr = rdr.listErr.Error()
	}
}

// unchanged reports on the targets whose load never changed, from
// converged (a switch period into the steady phase) to end, and returns
// the names of those at their level by then, and of those of them whose
// spec.replicas did not move from then (quiet).
func (r *Report) unchanged(rec *recorder, converged, end time.Time) (names, quiet map[string]bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	names, quiet = map[string]bool{}, map[string]bool{}
	u := &r.Unchanged
	for name, k := range rec.kpa {
		if k.switching {
			continue
		}
		u.Targets++
		// Created at its level; each move leaves it where it went.
		at := k.level
		for _, m := range k.moves {
			if m.at.Before(converged) {
				at = m.to
			}
		}
		if at != k.level {
			u.NotAtLevel++
			continue
		}
		names[name] = true
		moved := false
		for _, m := range k.moves {
			if m.at.Before(converged) || m.at.After(end) {
				continue
			}
			u.Moves++
			moved = true
			if len(u.Examples) < 5 {
				u.Examples = append(u.Examples, fmt.Sprintf("%s %d → %d at %s", name, m.from, m.to, m.at.Format("15:04:05.000")))
			}
		}
		if moved {
			u.Moved++
		} else {
			quiet[name] = true
		}
	}
	return names, quiet
}

// Goals judged at full load only.
const (
	goalCPUCores = 0.5
	goalPeakMiB  = 1024
)

// FullLoad reports whether the run reached the load it intended: every KPA
// target decided; at the end, at least fullLoadPods of the pods its levels
// imply served (a few targets are between levels at any time); and the
// collectors scraping them every second (at most fullLoadUnscraped of the
// polled steady targets' seconds without a sample). A collector that
// falls behind scrapes less, and its CPU would read low.
func (r *Report) FullLoad() bool {
	return r.ImpliedPods > 0 && float64(r.Pods) >= fullLoadPods*float64(r.ImpliedPods) && r.Undecided == 0 &&
		r.unscraped() <= fullLoadUnscraped
}

// unscraped is the part of the polled steady targets' seconds without a
// scrape sample.
func (r *Report) unscraped() float64 {
	sp := r.Unchanged.Sampling
	if sp.Seconds == 0 {
		return 0
	}
	return float64(sp.Missing) / float64(sp.Seconds)
}

// fullLoadPods is the part of the implied pods a run at full load serves
// at its end (switching targets are between levels), fullLoadUnscraped the
// part of the seconds it may leave unscraped; settledPods the part served
// before the steady phase starts (no load has switched yet).
const (
	fullLoadPods      = 0.95
	fullLoadUnscraped = 0.01
	settledPods       = 0.99
)

func (r *Report) writeFullLoad(w io.Writer, cpu, peak float64) {
	if !r.FullLoad() {
		fmt.Fprintf(w, "full load not reached (%d of %d implied pods served, %d KPA targets without a decision, %.1f %% of the polled steady targets' seconds unscraped): CPU and memory goals not judged (CPU %.3f cores, peak RSS %.0f MiB)\n",
			r.Pods, r.ImpliedPods, r.Undecided, 100*r.unscraped(), cpu, peak)
		return
	}
	verdict := func(ok bool) string {
		if ok {
			return "held"
		}
		return "NOT held"
	}
	fmt.Fprintf(w, "full load reached (%d of %d implied pods served, every KPA target decided, %.1f %% of the polled steady targets' seconds unscraped): CPU %.3f cores (goal ≤ %.1f: %s), peak RSS %.0f MiB (goal ≤ %d MiB: %s)\n",
		r.Pods, r.ImpliedPods, 100*r.unscraped(), cpu, goalCPUCores, verdict(cpu <= goalCPUCores), peak, goalPeakMiB, verdict(peak <= goalPeakMiB))
}
