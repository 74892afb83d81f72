package scale

import (
	"flag"
	"io"
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestMemoryLimitIsTheChart's: a run's services get the memory limit the
// chart gives each container unless told otherwise.
func TestMemoryLimitIsTheChart(t *testing.T) {
	b, err := os.ReadFile("../../charts/tidal/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type service struct {
		Resources struct {
			Limits map[string]string `json:"limits"`
		} `json:"resources"`
	}
	var values struct {
		Collector service `json:"collector"`
		Decider   service `json:"decider"`
		Actuator  service `json:"actuator"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	for svc, v := range map[string]service{"collector": values.Collector, "decider": values.Decider, "actuator": values.Actuator} {
		if got := v.Resources.Limits["memory"]; got != chartMemoryLimit {
			t.Errorf("values.yaml %s.resources.limits.memory = %q; the scale run assumes %q", svc, got, chartMemoryLimit)
		}
	}
	if got, want := DefaultConfig().MemoryLimit, int64(512<<20); got != want {
		t.Errorf("default MemoryLimit = %d, want %d", got, want)
	}
}

func TestMemoryLimitFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want int64
		ok   bool
	}{
		{"1Gi", 1 << 30, true},
		{"0", 0, true},
		{"768M", 768_000_000, true},
		{"-1Mi", 0, false},
		{"lots", 0, false},
	} {
		var c Config
		fs := flag.NewFlagSet("scale", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		err := fs.Parse([]string{"-memory-limit", tc.arg})
		if (err == nil) != tc.ok || tc.ok && c.MemoryLimit != tc.want {
			t.Errorf("-memory-limit %s: %d, %v; want %d, ok %t", tc.arg, c.MemoryLimit, err, tc.want, tc.ok)
		}
	}
}
