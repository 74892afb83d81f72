package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tidalscale/tidal/sim/tracegen"
)

// generate is `tidal-sim generate`: it writes a trace with the paper's mix
// of invocation patterns (package sim/tracegen) in both Azure formats.
func generate(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tidal-sim generate", flag.ContinueOnError)
	var cfg tracegen.Config
	var dir string
	var with2021 bool
	var classes string
	fs.IntVar(&cfg.Functions, "functions", 500, "Functions to generate.")
	fs.IntVar(&cfg.Days, "days", 3, "Days to generate: one 2019-format file each.")
	fs.IntVar(&cfg.FunctionsPerApp, "functions-per-app", 1, "Most functions of one application (each gets 1 to this many, uniformly).")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "Seed of every draw.")
	fs.StringVar(&dir, "out", "", "Directory to write into (created): invocations_per_function_md.anon.dNN.csv per day; required.")
	fs.BoolVar(&with2021, "2021", false, "Also write the same invocations in the 2021 per-invocation format, invocations_2021.csv (about 150 bytes an invocation).")
	fs.StringVar(&classes, "class", "", "Write only the functions of these classes (comma-separated: timer, regular, bursty, diurnal, rare), each as the whole trace has it, to study one pattern; empty means all.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir == "" {
		return errors.New("generate: -out: required")
	}
	fns, err := tracegen.Generate(cfg)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if classes != "" {
		if fns, err = only(fns, classes); err != nil {
			return fmt.Errorf("generate: -class: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	write := func(name string, fill func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		if err := fill(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("generate %s: %w", name, err)
		}
		return f.Close()
	}
	for d := range cfg.Days {
		if err := write(fmt.Sprintf("invocations_per_function_md.anon.d%02d.csv", d+1), func(w io.Writer) error { return tracegen.Write2019(w, fns, d) }); err != nil {
			return err
		}
	}
	if with2021 {
		if err := write("invocations_2021.csv", func(w io.Writer) error { return tracegen.Write2021(w, fns) }); err != nil {
			return err
		}
	}
	s := tracegen.Summarize(fns, cfg.Days)
	fmt.Fprintf(out, "%d functions in %d applications over %d days, %d invocations\n", s.Functions, s.Apps, cfg.Days, s.Invocations)
	for c, n := range s.Classes {
		fmt.Fprintf(out, "  %-8s %4d (%.1f%%)\n", tracegen.Class(c), n, 100*float64(n)/float64(s.Functions))
	}
	fmt.Fprintf(out, "invoked once an hour or less: %.1f%% of functions; once a minute or less: %.1f%%\n", 100*s.HourlyOrLess, 100*s.MinutelyOrLess)
	return nil
}

// only keeps the functions of the comma-separated classes.
func only(fns []tracegen.Function, classes string) ([]tracegen.Function, error) {
	var keep [len(tracegen.Summary{}.Classes)]bool
	for _, name := range strings.Split(classes, ",") {
		c, err := tracegen.ParseClass(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		keep[c] = true
	}
	return slices.DeleteFunc(fns, func(f tracegen.Function) bool { return !keep[f.Class] }), nil
}
