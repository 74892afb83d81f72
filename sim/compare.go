package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tidalscale/tidal/sim/timeplot"
	"github.com/tidalscale/tidal/sim/trace"
)

// Compare replays one trace through every configuration, in order.
func Compare(tr *trace.Trace, cfgs []Configuration, opts Options) ([]*Result, error) {
	out := make([]*Result, 0, len(cfgs))
	for i := range cfgs {
		r, err := Run(tr, &cfgs[i], opts)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// AzureOptions select the functions of an Azure file to replay.
type AzureOptions struct {
	// Function keeps only rows whose HashFunction starts with it; empty
	// keeps all.
	Function string
	// Limit stops after this many functions; 0 means all.
	Limit int
	// Parallel replays this many targets at once; 0 or 1 means one at a
	// time. The results do not depend on it: targets are merged in order.
	Parallel int
}

// CompareSource replays every selected target of src (a function, or an
// application) through every configuration and merges each
// configuration's results over the targets, in src's order whatever
// sel.Parallel is. Each target's arrivals are placed with a seed of its
// own, Options.Seed mixed with its hashes (FNV-1a), so a target's replay
// does not depend on the ones around it. With Options.Timeline and exactly
// one target replayed, the results keep its timeline.
func CompareSource(src trace.Source, cfgs []Configuration, opts Options, sel AzureOptions) ([]*Result, error) {
	totals := make([]*Result, len(cfgs))
	for i := range cfgs {
		totals[i] = &Result{Config: cfgs[i].Name, Strategy: cfgs[i].Strategy}
	}
	workers := max(sel.Parallel, 1)
	type job struct {
		n  int
		tg *trace.Target
	}
	type done struct {
		n   int
		res []*Result
		err error
	}
	jobs := make(chan job, workers)
	results := make(chan done, workers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readErr error
	n := 0
	var wg sync.WaitGroup
	// One reader: Sources are not safe for concurrent use.
	wg.Go(func() {
		defer close(jobs)
		for sel.Limit == 0 || n < sel.Limit {
			tg, err := src.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				readErr = err
				return
			}
			if sel.Function != "" && !strings.HasPrefix(tg.Function, sel.Function) {
				continue
			}
			select {
			case jobs <- job{n, tg}:
				n++
			case <-ctx.Done():
				return
			}
		}
	})
	var work sync.WaitGroup
	for range workers {
		work.Go(func() {
			for j := range jobs {
				fo := opts
				fo.Seed = opts.Seed ^ targetSeed(j.tg)
				d := done{n: j.n, res: make([]*Result, len(cfgs))}
				for i := range cfgs {
					res, err := Run(&j.tg.Trace, &cfgs[i], fo)
					if err != nil {
						d.err = fmt.Errorf("%s: line %d: %w", j.tg.File, j.tg.Line, err)
						break
					}
					d.res[i] = res
				}
				select {
				case results <- d:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		work.Wait()
		close(results)
	}()
	// Merge in order: at most the workers' results wait for an earlier one.
	waiting := map[int]done{}
	next := 0
	var runErr error
	for d := range results {
		if d.err != nil && runErr == nil {
			runErr = d.err
			cancel()
		}
		if runErr != nil {
			continue
		}
		waiting[d.n] = d
		for {
			w, ok := waiting[next]
			if !ok {
				break
			}
			delete(waiting, next)
			for i, res := range w.res {
				totals[i].Merge(res)
				if next == 0 {
					totals[i].Timeline = res.Timeline
				} else {
					totals[i].Timeline = nil
				}
			}
			next++
		}
	}
	cancel()
	wg.Wait()
	switch {
	case runErr != nil:
		return nil, runErr
	case readErr != nil:
		return nil, readErr
	case n == 0:
		return nil, errors.New("no function selected")
	}
	return totals, nil
}

// targetSeed hashes a target's identity into its seed.
func targetSeed(t *trace.Target) uint64 {
	h := fnv.New64a()
	for _, s := range []string{t.Owner, t.App, t.Function} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// WriteTable writes the results side by side, one configuration a row.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tstrategy\ttargets\tarrived\tserved\tqueued at end\twait p50\twait p99\twait max\t"+
		"cold starts\tcold-start requests\tcold-start rate p50/p75/p90\tpod-seconds\tidle pod-seconds\tscale events\ttime at zero\t")
	for _, r := range results {
		st := r.Wait.Stats()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%.0f\t%.0f\t%d\t%.1f%%\t\n",
			r.Config, r.Strategy, r.Targets, r.Arrived, r.Served, r.Queued,
			FormatDuration(st.P50), FormatDuration(st.P99), FormatDuration(st.Max),
			r.ColdStarts, r.ColdStartRequests, rateTriple(&r.ColdStartRates), r.PodSeconds, r.IdlePodSeconds, r.ScaleEvents, 100*r.zeroShare())
	}
	return tw.Flush()
}

// zeroShare is the share of the replayed time at zero replicas.
func (r *Result) zeroShare() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return r.AtZero.Seconds() / r.Duration.Seconds()
}

func rateTriple(h *Rates) string {
	if h.Len() == 0 {
		return "-"
	}
	return fmt.Sprintf("%s/%s/%s", pct(h.Quantile(0.50)), pct(h.Quantile(0.75)), pct(h.Quantile(0.90)))
}

// pct writes a rate kept to 0.01 % as a percentage: 0.57%, 100%.
func pct(f float64) string { return strconv.FormatFloat(math.Round(1e4*f)/1e2, 'f', -1, 64) + "%" }

// Summary is one configuration's result as WriteJSON writes it.
type Summary struct {
	Name     string `json:"name"`
	Strategy string `json:"strategy"`
	// Targets is how many traces (functions, or applications) were
	// replayed; Functions how many of them had requests.
	Targets   int `json:"targets"`
	Functions int `json:"functions"`
	// Requests arrived (records produced, for lag), Served were served,
	// QueuedAtEnd were not by the end.
	Requests    int64 `json:"requests"`
	Served      int64 `json:"served"`
	QueuedAtEnd int64 `json:"queuedAtEnd"`
	// ColdStartRequests found no warm pod; ColdStarts counts ready pods
	// going from 0 to more.
	ColdStartRequests int64 `json:"coldStartRequests"`
	ColdStarts        int   `json:"coldStarts"`
	// PodSeconds integrates the ready pods; IdlePodSeconds those with no
	// request in them.
	PodSeconds     float64 `json:"podSeconds"`
	IdlePodSeconds float64 `json:"idlePodSeconds"`
	// ColdStartRateP50, P75 and P90 are percentiles over the functions of
	// each one's share of requests that found no warm pod (0 to 1).
	ColdStartRateP50 float64 `json:"coldStartRateP50"`
	ColdStartRateP75 float64 `json:"coldStartRateP75"`
	ColdStartRateP90 float64 `json:"coldStartRateP90"`
	// WaitP50, WaitP99 and WaitMax are in seconds.
	WaitP50     float64 `json:"waitP50"`
	WaitP99     float64 `json:"waitP99"`
	WaitMax     float64 `json:"waitMax"`
	ScaleEvents int     `json:"scaleEvents"`
	// TimeAtZero is the share of the time at zero replicas (0 to 1).
	TimeAtZero float64 `json:"timeAtZero"`
	// Seconds is the replayed time, summed over the targets.
	Seconds float64 `json:"seconds"`
}

// Summarize is r as WriteJSON writes it.
func (r *Result) Summarize() Summary {
	st := r.Wait.Stats()
	return Summary{
		Name: r.Config, Strategy: r.Strategy, Targets: r.Targets, Functions: r.ColdStartRates.Len(),
		Requests: r.Arrived, Served: r.Served, QueuedAtEnd: r.Queued,
		ColdStartRequests: r.ColdStartRequests, ColdStarts: r.ColdStarts,
		PodSeconds: r.PodSeconds, IdlePodSeconds: r.IdlePodSeconds,
		ColdStartRateP50: r.ColdStartRates.Quantile(0.50), ColdStartRateP75: r.ColdStartRates.Quantile(0.75), ColdStartRateP90: r.ColdStartRates.Quantile(0.90),
		WaitP50: st.P50.Seconds(), WaitP99: st.P99.Seconds(), WaitMax: st.Max.Seconds(),
		ScaleEvents: r.ScaleEvents, TimeAtZero: r.zeroShare(), Seconds: r.Duration.Seconds(),
	}
}

// WriteJSON writes the results as {"configurations": [Summary, …]}, one
// per configuration in order, indented.
func WriteJSON(w io.Writer, results []*Result) error {
	out := struct {
		Configurations []Summary `json:"configurations"`
	}{Configurations: make([]Summary, 0, len(results))}
	for _, r := range results {
		out.Configurations = append(out.Configurations, r.Summarize())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// FormatDuration writes a wait compactly and always alike: 0, 850µs,
// 12.3ms, 2.49s, 3m12s.
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// Plot draws every result's timeline (the load, what the decider observed,
// desired and ready replicas) into a PNG at path, one configuration under
// the other.
func Plot(path string, results []*Result) error {
	var series []timeplot.Series
	for _, r := range results {
		if len(r.Timeline) == 0 {
			continue
		}
		unit := "requests/s"
		if r.Strategy == StrategyLag {
			unit = "records/s"
		}
		s := timeplot.Series{Name: r.Config + " (" + r.Strategy + ")", LoadUnit: unit, Points: make([]timeplot.Point, 0, len(r.Timeline))}
		for _, p := range r.Timeline {
			s.Points = append(s.Points, timeplot.Point{Seconds: p.At.Seconds(), Load: p.Load, Observed: p.Observed,
				HasObserved: p.Desired >= 0, Desired: p.Desired, Ready: p.Ready})
		}
		series = append(series, s)
	}
	if len(series) == 0 {
		return errors.New("plot: no timeline (a plot needs a single trace, or one Azure function)")
	}
	return timeplot.Write(path, series)
}
