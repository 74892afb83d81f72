// Command tidal-sim replays a load trace through tidal's own decider and
// reconciler in virtual time and compares configurations side by side:
// requests served, waits, cold starts, pod-seconds, scale events and time at
// zero (package sim).
//
//	tidal-sim -config configs.yaml -rates trace.csv -plot out.png
//	tidal-sim -config configs.yaml -azure invocations_per_function_md.anon.d01.csv -limit 1000
//	tidal-sim -config configs.yaml -history window.json
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tidalscale/tidal/sim"
	"github.com/tidalscale/tidal/sim/trace"
)

// maxConfigBytes bounds the configuration file.
const maxConfigBytes = 1 << 20

type flags struct {
	config, rates, azure, history, plot, function string
	seed                                          uint64
	limit                                         int
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "Configurations to compare, a YAML or JSON file (package sim's File); required.")
	fs.StringVar(&f.rates, "rates", "", "Trace: a CSV of per-second rates (requests/s for kpa, records produced/s for lag).")
	fs.StringVar(&f.azure, "azure", "", "Trace: an Azure Functions 2019 invocations_per_function_md.anon.dNN.csv file; every function is replayed and the results summed.")
	fs.StringVar(&f.history, "history", "", "Trace: GetWindow responses of one target from a running tidal's collector, JSON as grpcurl prints them, one after another.")
	fs.StringVar(&f.function, "function", "", "With -azure: only functions whose HashFunction starts with this; empty means all.")
	fs.IntVar(&f.limit, "limit", 0, "With -azure: replay at most this many functions; 0 means all.")
	fs.Uint64Var(&f.seed, "seed", 1, "Seed of every random choice (arrival times within a minute or second, the scraper's sample, service times).")
	fs.StringVar(&f.plot, "plot", "", "Write a PNG of each configuration's load and replicas here; needs a single trace (or -azure with one function); empty means none.")
}

func (f *flags) validate() error {
	if f.config == "" {
		return errors.New("-config: required")
	}
	n := 0
	for _, s := range []string{f.rates, f.azure, f.history} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("want exactly one of -rates, -azure, -history")
	}
	if f.limit < 0 {
		return fmt.Errorf("-limit %d: want >= 0 (0 means all)", f.limit)
	}
	if (f.function != "" || f.limit != 0) && f.azure == "" {
		return errors.New("-function and -limit: only with -azure")
	}
	return nil
}

func main() {
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
	opts := sim.Options{Seed: f.seed, Timeline: f.plot != ""}
	var results []*sim.Result
	switch {
	case f.azure != "":
		results, err = withFile(f.azure, func(r io.Reader) ([]*sim.Result, error) {
			return sim.CompareAzure(r, f.azure, cfgs, opts, sim.AzureOptions{Function: f.function, Limit: f.limit})
		})
	case f.rates != "":
		results, err = withFile(f.rates, func(r io.Reader) ([]*sim.Result, error) {
			tr, err := trace.ReadRates(r, f.rates)
			if err != nil {
				return nil, err
			}
			return sim.Compare(&tr, cfgs, opts)
		})
	default:
		results, err = withFile(f.history, func(r io.Reader) ([]*sim.Result, error) {
			tr, err := trace.ReadHistory(r, f.history)
			if err != nil {
				return nil, err
			}
			return sim.Compare(&tr, cfgs, opts)
		})
	}
	if err != nil {
		return err
	}
	if err := sim.WriteTable(out, results); err != nil {
		return err
	}
	if f.plot != "" {
		if err := sim.Plot(f.plot, results); err != nil {
			return err
		}
		fmt.Fprintf(out, "plot: %s\n", f.plot)
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
