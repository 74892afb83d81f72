package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/services/server"
)

// fuzzedFlags lists the decider's flags a fuzz input may set: all but
// those naming files or directories.
func fuzzedFlags() []string {
	var cfg config
	fs := flag.NewFlagSet("tidal-decider", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(fl.Name, "file") && !strings.HasPrefix(fl.Name, "config-") {
			names = append(names, fl.Name)
		}
	})
	return names // VisitAll goes in name order
}

// FuzzFlags sets any two flags to any values and validates: a refusal
// names one of the flags set (or the group they belong to); an accepted
// value prints back (flag.Value's String) to a value that parses to the
// same; the tick grid is whole seconds with a resolution and lateness
// inside one tick.
func FuzzFlags(f *testing.F) {
	names := fuzzedFlags()
	idx := func(name string) uint8 {
		i := slices.Index(names, name)
		if i < 0 {
			f.Fatalf("no flag --%s", name)
		}
		return uint8(i)
	}
	for _, s := range []struct{ n1, v1, n2, v2 string }{
		{"tick-interval", "2s", "tick-resolution", "100ms"},
		{"tick-interval", "1500ms", "tick-lateness", "-1s"},
		{"tick-interval", "1s", "tick-resolution", "2s"},
		{"tick-interval", "9223372036854775807ns", "tick-lateness", "9223372036s"},
		{"scale-workers", "0", "scale-timeout", "0s"},
		{"scale-retry-min", "10s", "scale-retry-max", "1s"},
		{"max-targets", "-1", "dry-run", "yes"},
		{"actuator-addr", "", "log-level", "trace\x1b[2J"},
		{"grpc-addr", "127.0.0.1:0\n", "http-addr", ":"},
		{"shutdown-grace", "NaN", "advertise-addr", strings.Repeat("a", 5000)},
	} {
		f.Add(idx(s.n1), s.v1, idx(s.n2), s.v2)
	}
	f.Fuzz(func(t *testing.T, i1 uint8, v1 string, i2 uint8, v2 string) {
		n1, n2 := names[int(i1)%len(names)], names[int(i2)%len(names)]
		var cfg config
		fs, err := parse(&cfg, []string{"--" + n1 + "=" + v1, "--" + n2 + "=" + v2})
		if err != nil {
			msg := err.Error()
			named := func(n string) bool {
				group, _, _ := strings.Cut(n, "-")
				return strings.Contains(msg, "-"+n) || strings.Contains(msg, "--"+group+"-*")
			}
			if !named(n1) && !named(n2) {
				t.Fatalf("--%s=%q --%s=%q: error %q names neither flag", n1, v1, n2, v2, msg)
			}
			return
		}
		var args []string
		for _, n := range []string{n1, n2} {
			args = append(args, "--"+n+"="+fs.Lookup(n).Value.String())
		}
		var again config
		fs2, err := parse(&again, args)
		for _, n := range []string{n1, n2} {
			if p := fs.Lookup(n).Value.String(); err != nil || fs2.Lookup(n).Value.String() != p {
				t.Fatalf("--%s prints %q, which parses to %q, %v", n, p, fs2.Lookup(n).Value.String(), err)
			}
		}
		if cfg.tickInterval < time.Second || cfg.tickInterval%time.Second != 0 ||
			cfg.tickResolution <= 0 || cfg.tickResolution > cfg.tickInterval || cfg.tickLateness < 0 || cfg.tickLateness >= cfg.tickInterval {
			t.Fatalf("accepted tick %s, resolution %s, lateness %s", cfg.tickInterval, cfg.tickResolution, cfg.tickLateness)
		}
	})
}

// parse is server.Parse with the flag set kept, and without env overrides
// from the test's environment.
func parse(cfg *config, args []string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("tidal-decider", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := server.ParseFlags(fs, args); err != nil {
		return fs, err
	}
	return fs, cfg.Validate()
}
