package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
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
}

// CompareAzure replays every selected function of an Azure Functions 2019
// invocations file through every configuration and merges each
// configuration's results over the functions. The file is read one row at
// a time. Each function's arrivals are placed with a seed of its own,
// Options.Seed mixed with its owner, app and function hashes (FNV-1a), so a
// function's replay does not depend on the rows around it. With
// Options.Timeline and exactly one function replayed, the results keep its
// timeline.
func CompareAzure(r io.Reader, name string, cfgs []Configuration, opts Options, sel AzureOptions) ([]*Result, error) {
	ar, err := trace.NewAzureReader(r, name)
	if err != nil {
		return nil, err
	}
	totals := make([]*Result, len(cfgs))
	for i := range cfgs {
		totals[i] = &Result{Config: cfgs[i].Name, Strategy: cfgs[i].Strategy}
	}
	n := 0
	for sel.Limit == 0 || n < sel.Limit {
		fn, err := ar.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if sel.Function != "" && !strings.HasPrefix(fn.Function, sel.Function) {
			continue
		}
		n++
		tr := fn.Trace()
		fo := opts
		fo.Seed = opts.Seed ^ functionSeed(fn)
		for i := range cfgs {
			res, err := Run(&tr, &cfgs[i], fo)
			if err != nil {
				return nil, fmt.Errorf("azure %s: line %d: %w", name, fn.Line, err)
			}
			totals[i].Merge(res)
			if n == 1 {
				totals[i].Timeline = res.Timeline
			} else {
				totals[i].Timeline = nil
			}
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("azure %s: no function selected", name)
	}
	return totals, nil
}

func functionSeed(fn *trace.Function) uint64 {
	h := fnv.New64a()
	for _, s := range []string{fn.Owner, fn.App, fn.Function} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// WriteTable writes the results side by side, one configuration a row.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tstrategy\ttargets\tarrived\tserved\tqueued at end\twait p50\twait p99\twait max\tcold starts\tpod-seconds\tscale events\ttime at zero\t")
	for _, r := range results {
		st := r.Wait.Stats()
		zero := 0.0
		if r.Duration > 0 {
			zero = 100 * r.AtZero.Seconds() / r.Duration.Seconds()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%.0f\t%d\t%.1f%%\t\n",
			r.Config, r.Strategy, r.Targets, r.Arrived, r.Served, r.Queued,
			FormatDuration(st.P50), FormatDuration(st.P99), FormatDuration(st.Max),
			r.ColdStarts, r.PodSeconds, r.ScaleEvents, zero)
	}
	return tw.Flush()
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
