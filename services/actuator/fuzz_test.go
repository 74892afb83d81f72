package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server"
)

// fuzzedFlags lists the actuator's flags a fuzz input may set: all but
// those naming files or directories, which Validate would read.
func fuzzedFlags() []string {
	var cfg config
	fs := flag.NewFlagSet("tidal-actuator", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(fl.Name, "file") && fl.Name != "kubeconfig" && !strings.HasPrefix(fl.Name, "config-") {
			names = append(names, fl.Name)
		}
	})
	return names // VisitAll goes in name order
}

// FuzzFlags sets any two flags to any values and validates: a refusal
// names one of the flags set (or one checked against them); an accepted
// value prints back (flag.Value's String) to a value that parses to the
// same; --scale-kinds never lets a Pod through, and its kinds are what
// Scale accepts.
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
		{"scale-kinds", "apps/Deployment, test.tidal.dev/Scalable,core/ReplicationController", "scaler", "memory"},
		{"scale-kinds", "core/Pod", "scaler", "kubernetes"},
		{"scale-kinds", "/Pod,apps/Deployment,apps/Deployment", "workers", "65"},
		{"scale-kinds", "Apps/deployment", "kafka-brokers", "k1:9092,k2"},
		{"scale-kinds", "", "kafka-brokers", ":9092"},
		{"scaler", "kubernetes", "buckets", "4"},
		{"scaler", "kubernetes", "lease-prefix", "Tidal_X"},
		{"scaler", "kubernetes", "kube-qps", "NaN"},
		{"scaler", "kubernetes", "resync", "-1s"},
		{"scaler", "kubernetes", "target-retry", "0s"},
		{"scaler", "kubernetes", "function-sidecar-image", ""},
		{"grpc-addr", "127.0.0.1:0\n", "log-level", "trace\x1b[2J"},
		{"lease-duration", "1500ms", "renew-deadline", "1s"},
		{"shutdown-grace", "9223372036854775807ns", "advertise-addr", strings.Repeat("a", 5000)},
	} {
		f.Add(idx(s.n1), s.v1, idx(s.n2), s.v2)
	}
	f.Fuzz(func(t *testing.T, i1 uint8, v1 string, i2 uint8, v2 string) {
		n1, n2 := names[int(i1)%len(names)], names[int(i2)%len(names)]
		var cfg config
		fs, err := parse(&cfg, []string{"--" + n1 + "=" + v1, "--" + n2 + "=" + v2})
		if err != nil {
			msg := err.Error()
			timings := strings.Contains(msg, "-renew-deadline ") && strings.Contains(msg, "-retry-period ")
			if !strings.Contains(msg, "-"+n1) && !strings.Contains(msg, "-"+n2) && !timings {
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
		for _, gk := range cfg.kinds.List() {
			ref := &commonv1.TargetRef{Namespace: "ns", Name: "a", ApiVersion: gk.Group + "/v1", Kind: gk.Kind}
			if gk.Group == "" {
				ref.ApiVersion = "v1"
			}
			if _, ok := cfg.kinds.Allows(ref.GetApiVersion(), ref.GetKind()); gk.Group == "" && gk.Kind == "Pod" || !ok {
				t.Fatalf("--scale-kinds %q: %v allowed, not reached by %v", cfg.kinds.String(), gk, ref)
			}
		}
		if _, ok := cfg.kinds.Allows("v1", "Pod"); ok {
			t.Fatalf("--scale-kinds %q lets a Pod be scaled", cfg.kinds.String())
		}
	})
}

// parse is server.Parse with the flag set kept, and without env overrides
// from the test's environment.
func parse(cfg *config, args []string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("tidal-actuator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := server.ParseFlags(fs, args); err != nil {
		return fs, err
	}
	return fs, cfg.Validate()
}
