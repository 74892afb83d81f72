// Command tidal-sim replays a load trace through tidal's own decider and
// reconciler in virtual time and compares configurations side by side:
// requests served, waits, cold starts (and the requests that found no warm
// pod, per function), pod-seconds (and idle pod-seconds), scale events and
// time at zero (package sim).
//
//	tidal-sim -config configs.yaml -rates trace.csv -plot out.png
//	tidal-sim -config configs.yaml -azure d01.csv,d02.csv,d03.csv -group app
//	tidal-sim -config configs.yaml -azure2021 AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt
//	tidal-sim -config configs.yaml -azure d01.csv -keep-alive-sweep 0,1m,10m,60m -pareto front.png -format json
//	tidal-sim -config configs.yaml -history window.json
//	tidal-sim generate -functions 500 -days 3 -out trace/
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/tidalscale/tidal/sim"
	"github.com/tidalscale/tidal/sim/trace"
)

// maxConfigBytes bounds the configuration file.
const maxConfigBytes = 1 << 20

type flags struct {
	config, rates, azure, azure2021, history, plot, function string
	group, format, sweep, pareto                             string
	seed                                                     uint64
	limit, parallel                                          int

	keepAlives []time.Duration
	byApp      bool
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "Configurations to compare, a YAML or JSON file (package sim's File); required.")
	fs.StringVar(&f.rates, "rates", "", "Trace: a CSV of per-second rates (requests/s for kpa, records produced/s for lag).")
	fs.StringVar(&f.azure, "azure", "", "Trace: Azure Functions 2019 invocations_per_function_md.anon.dNN.csv files, comma-separated, one a day in order: each function's days are replayed one after another, and the results summed over the functions.")
	fs.StringVar(&f.azure2021, "azure2021", "", "Trace: an Azure Functions 2021 per-invocation file (app,func,end_timestamp,duration; an invocation starts at end_timestamp - duration); every function is replayed over the file's whole span and the results summed.")
	fs.StringVar(&f.group, "group", "function", "With -azure or -azure2021: replay each function, or each application (its functions' invocations together, as one target): function or app.")
	fs.StringVar(&f.history, "history", "", "Trace: GetWindow responses of one target from a running tidal's collector, JSON as grpcurl prints them, one after another.")
	fs.StringVar(&f.function, "function", "", "With -azure or -azure2021 by function: only functions whose hash starts with this; empty means all.")
	fs.IntVar(&f.limit, "limit", 0, "With -azure or -azure2021: replay at most this many functions (applications); 0 means all.")
	fs.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "With -azure or -azure2021: replay this many functions at once; the results do not depend on it.")
	fs.Uint64Var(&f.seed, "seed", 1, "Seed of every random choice (arrival times within a minute or second, the scraper's sample, service times).")
	fs.StringVar(&f.plot, "plot", "", "Write a PNG of each configuration's load and replicas here; needs a single trace (or one function); empty means none.")
	fs.StringVar(&f.format, "format", "table", "Output: table, or json (per configuration: name, requests, coldStartRequests, podSeconds, idlePodSeconds, coldStartRateP50/P75/P90 and more).")
	fs.StringVar(&f.sweep, "keep-alive-sweep", "", "Replay every configuration once per fixed keep-alive in this comma-separated list of durations (0,1m,10m,60m): its config-autoscaler scale-to-zero-pod-retention-period, how long Knative keeps the last pod once the target turned inactive.")
	fs.StringVar(&f.pareto, "pareto", "", "Write a PNG of each configuration's idle pod-hours against its 75th-percentile function's cold-start rate here, a sweep's points joined; empty means none.")
}

func (f *flags) validate() error {
	if f.config == "" {
		return errors.New("-config: required")
	}
	n := 0
	for _, s := range []string{f.rates, f.azure, f.azure2021, f.history} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("want exactly one of -rates, -azure, -azure2021, -history")
	}
	many := f.azure != "" || f.azure2021 != ""
	if f.limit < 0 {
		return fmt.Errorf("-limit %d: want >= 0 (0 means all)", f.limit)
	}
	if (f.function != "" || f.limit != 0) && !many {
		return errors.New("-function and -limit: only with -azure or -azure2021")
	}
	if f.parallel < 0 || f.parallel > 256 {
		return fmt.Errorf("-parallel %d: want 1 to 256", f.parallel)
	}
	switch f.group {
	case "", "function":
	case "app":
		if !many {
			return errors.New("-group app: only with -azure or -azure2021")
		}
		if f.function != "" {
			return errors.New("-function: selects functions, not with -group app")
		}
		f.byApp = true
	default:
		return fmt.Errorf("-group %q: want function or app", f.group)
	}
	if f.format != "" && f.format != "table" && f.format != "json" {
		return fmt.Errorf("-format %q: want table or json", f.format)
	}
	if f.sweep != "" {
		for _, v := range strings.Split(f.sweep, ",") {
			v = strings.TrimSpace(v)
			if v == "0" {
				v = "0s"
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("-keep-alive-sweep: %q: want a duration of at least 0, such as 10m", v)
			}
			f.keepAlives = append(f.keepAlives, d)
		}
	}
	return nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "generate" {
		if err := generate(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "tidal-sim:", err)
			os.Exit(2)
		}
		return
	}
	var f flags
	fs := flag.NewFlagSet("tidal-sim", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := f.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "tidal-sim:", err)
		os.Exit(2)
	}
	if err := run(&f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tidal-sim:", err)
		os.Exit(1)
	}
}

func run(f *flags, out io.Writer) error {
	cfgs, err := readConfig(f.config)
	if err != nil {
		return err
	}
	if len(f.keepAlives) > 0 {
		if cfgs, err = sim.Sweep(cfgs, f.keepAlives); err != nil {
			return err
		}
	}
	opts := sim.Options{Seed: f.seed, Timeline: f.plot != ""}
	sel := sim.AzureOptions{Function: f.function, Limit: f.limit, Parallel: f.parallel}
	group := trace.ByFunction
	if f.byApp {
		group = trace.ByApp
	}
	var results []*sim.Result
	switch {
	case f.azure != "":
		src, closeFn, err := trace.OpenAzure(strings.Split(f.azure, ","), group)
		if err != nil {
			return err
		}
		results, err = sim.CompareSource(src, cfgs, opts, sel)
		if cerr := closeFn(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case f.azure2021 != "":
		results, err = withFile(f.azure2021, func(r io.Reader) ([]*sim.Result, error) {
			src, err := trace.ReadAzure2021(r, f.azure2021, group)
			if err != nil {
				return nil, err
			}
			return sim.CompareSource(src, cfgs, opts, sel)
		})
	default:
		path, read := f.rates, trace.ReadRates
		if f.history != "" {
			path, read = f.history, trace.ReadHistory
		}
		results, err = withFile(path, func(r io.Reader) ([]*sim.Result, error) {
			tr, err := read(r, path)
			if err != nil {
				return nil, err
			}
			return sim.Compare(&tr, cfgs, opts)
		})
	}
	if err != nil {
		return err
	}
	// With JSON on stdout, where the pictures went goes to stderr.
	write, note := sim.WriteTable, out
	if f.format == "json" {
		write, note = sim.WriteJSON, os.Stderr
	}
	if err := write(out, results); err != nil {
		return err
	}
	if f.plot != "" {
		if err := sim.Plot(f.plot, results); err != nil {
			return err
		}
		fmt.Fprintf(note, "plot: %s\n", f.plot)
	}
	if f.pareto != "" {
		if err := sim.PlotPareto(f.pareto, cfgs, results); err != nil {
			return err
		}
		fmt.Fprintf(note, "pareto: %s\n", f.pareto)
	}
	return nil
}

func readConfig(path string) ([]sim.Configuration, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config %s: more than %d bytes", path, maxConfigBytes)
	}
	return sim.ParseFile(data)
}

func withFile(path string, read func(io.Reader) ([]*sim.Result, error)) ([]*sim.Result, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	return read(fh)
}
