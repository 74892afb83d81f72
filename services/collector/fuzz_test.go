package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidalscale/tidal/services/server"
)

// fuzzedFlags lists the collector's flags a fuzz input may set: all but
// those naming files or directories, which Validate would read.
func fuzzedFlags() []string {
	var cfg config
	fs := flag.NewFlagSet("tidal-collector", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(fl.Name, "file") && fl.Name != "kubeconfig" {
			names = append(names, fl.Name)
		}
	})
	return names // VisitAll goes in name order
}

// FuzzFlags sets any two flags to any values, as args or a Deployment's
// env would, and validates: a refusal names one of the flags set (or one
// checked against them), and an accepted value prints back (flag.Value's
// String) to a value that parses to the same; decider addresses are
// host:port with a port, and --decider-service reads back as it prints.
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
		{"decider-addr", "127.0.0.1:9002, 10.0.0.2:9002,", "history", "1m"},
		{"decider-addr", "nope", "decider-dns", "x:1"},
		{"decider-addr", ":", "shadow-decider-addr", "127.0.0.1:9002"},
		{"decider-addr", "host:", "scrape-timeout", "0s"},
		{"decider-dns", "decider:", "decider-dns-interval", "1s"},
		{"decider-service", "tidal-system/tidal-decider:9002", "discovery", "kubernetes"},
		{"decider-service", "bad", "discovery", "magic"},
		{"decider-service", "ns/name:99999", "discovery", "kubernetes"},
		{"decider-dns", "decider.tidal-system.svc:9002", "decider-dns-interval", "-1s"},
		{"buckets", "4", "lease-duration", "1s"},
		{"stream-batch-samples", "0", "lag-tick", "0s"},
		{"kube-qps", "NaN", "kube-burst", "-1"},
		{"max-targets", "-1", "pushed-target-ttl", "1e300s"},
		{"grpc-addr", "127.0.0.1:0\n", "log-level", "trace\x1b[2J"},
		{"history", "9223372036854775807ns", "shutdown-grace", "-0s"},
		{"collector-id", strings.Repeat("c", 5000), "scrape-max-text-body", "0x10"},
	} {
		f.Add(idx(s.n1), s.v1, idx(s.n2), s.v2)
	}
	f.Fuzz(func(t *testing.T, i1 uint8, v1 string, i2 uint8, v2 string) {
		n1, n2 := names[int(i1)%len(names)], names[int(i2)%len(names)]
		var cfg config
		fs, err := parse(&cfg, []string{"--" + n1 + "=" + v1, "--" + n2 + "=" + v2})
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "-"+n1) && !strings.Contains(msg, "-"+n2) && !relatedFlag(msg) {
				t.Fatalf("--%s=%q --%s=%q: error %q names neither flag", n1, v1, n2, v2, msg)
			}
			return
		}
		// Print both flags back (a list flag, fs.Func, prints nothing: it
		// keeps its value) and parse them together, as they were checked.
		printed := map[string]string{n1: v1, n2: v2}
		var args []string
		for _, n := range []string{n1, n2} {
			if p := fs.Lookup(n).Value.String(); p != "" {
				printed[n] = p
			}
			args = append(args, "--"+n+"="+printed[n])
		}
		var again config
		fs2, err := parse(&again, args)
		for _, n := range []string{n1, n2} {
			if p := fs.Lookup(n).Value.String(); err != nil || fs2.Lookup(n).Value.String() != p {
				t.Fatalf("--%s=%q prints %q, which parses to %q, %v", n, printed[n], p, fs2.Lookup(n).Value.String(), err)
			}
		}
		addrs := append(slices.Clone(cfg.deciderAddrs), cfg.shadowAddrs...)
		if cfg.deciderDNS != "" {
			addrs = append(addrs, cfg.deciderDNS)
		}
		for _, a := range addrs {
			_, port, err := net.SplitHostPort(a)
			if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 1 || p > 65535 || strings.TrimSpace(a) != a {
				t.Fatalf("accepted decider address %q", a)
			}
		}
		if cfg.deciderService != "" {
			ns, name, port, err := parseService(cfg.deciderService)
			if err != nil {
				t.Fatalf("accepted --decider-service %q: %v", cfg.deciderService, err)
			}
			ns2, name2, port2, err := parseService(fmt.Sprintf("%s/%s:%d", ns, name, port))
			if err != nil || ns2 != ns || name2 != name || port2 != port {
				t.Fatalf("--decider-service %q reads as %s/%s:%d, which reads as %s/%s:%d, %v", cfg.deciderService, ns, name, port, ns2, name2, port2, err)
			}
		}
	})
}

// parse is server.Parse with the flag set kept, and without env overrides
// from the test's environment.
func parse(cfg *config, args []string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("tidal-collector", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := server.ParseFlags(fs, args); err != nil {
		return fs, err
	}
	return fs, cfg.Validate()
}

// relatedFlag reports refusals that name the flags checked together, any
// of which the input may have set.
func relatedFlag(msg string) bool {
	return strings.HasPrefix(msg, "--decider-addr, --decider-service, --decider-dns:") || strings.Contains(msg, "-renew-deadline ") && strings.Contains(msg, "-retry-period ")
}
