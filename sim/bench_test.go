package sim

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tidalscale/tidal/sim/trace"
)

// syntheticDay is one function's day of per-minute counts with perDay
// invocations on average, shaped by a daily wave and Poisson noise (seeded).
func syntheticDay(seed uint64, perDay float64) trace.Trace {
	rng := rand.New(rand.NewPCG(seed, 1))
	counts := make([]int64, trace.Minutes)
	for m := range counts {
		mean := perDay / trace.Minutes * (1 + 0.8*math.Sin(2*math.Pi*float64(m-480)/trace.Minutes))
		// Poisson by inversion for small means, normal for large.
		if mean < 30 {
			l, k, p := math.Exp(-mean), int64(0), rng.Float64()
			for p > l {
				k++
				p *= rng.Float64()
			}
			counts[m] = k
		} else {
			counts[m] = max(int64(math.Round(mean+math.Sqrt(mean)*rng.NormFloat64())), 0)
		}
	}
	return trace.Trace{Name: "synthetic", Width: time.Minute, Counts: counts}
}

func knativeDefaults(tb testing.TB) *Configuration {
	c := &Configuration{Name: "knative-defaults", Pods: Pods{ReadyDelay: Duration(time.Second), ColdStart: Duration(2 * time.Second)}}
	if err := c.Check(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkDay replays one function's day (KPA, Knative's defaults) at
// several daily volumes.
func BenchmarkDay(b *testing.B) {
	for _, tc := range []struct {
		name   string
		perDay float64
	}{{"100/day", 100}, {"10k/day", 1e4}, {"1M/day", 1e6}} {
		b.Run(tc.name, func(b *testing.B) {
			tr := syntheticDay(1, tc.perDay)
			cfg := knativeDefaults(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(&tr, cfg, Options{Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// azureFile writes n functions' days in the Azure Functions 2019 format,
// each with a daily volume drawn log-uniformly between 1 and 10⁶
// invocations (seeded): a heavier mix than Azure's own, where most
// functions run at most once a minute.
func azureFile(n int) []byte {
	var b bytes.Buffer
	b.WriteString("HashOwner,HashApp,HashFunction,Trigger")
	for m := 1; m <= trace.Minutes; m++ {
		fmt.Fprintf(&b, ",%d", m)
	}
	b.WriteByte('\n')
	rng := rand.New(rand.NewPCG(42, 42))
	for i := range n {
		perDay := math.Pow(10, 6*rng.Float64())
		tr := syntheticDay(uint64(i), perDay)
		fmt.Fprintf(&b, "owner%04d,app%04d,fn%04d,http", i, i, i)
		for _, c := range tr.Counts {
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(c, 10))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// BenchmarkAzureDay replays n functions' day from an Azure-format file
// through one configuration (Knative's defaults), parsing included.
func BenchmarkAzureDay(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("functions=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "bench.csv")
			if err := os.WriteFile(path, azureFile(n), 0o600); err != nil {
				b.Fatal(err)
			}
			cfgs := []Configuration{*knativeDefaults(b)}
			b.ReportAllocs()
			for b.Loop() {
				res := compareAzure(b, path, cfgs, Options{Seed: 1}, AzureOptions{})
				if res[0].Targets != n {
					b.Fatalf("replayed %d functions, want %d", res[0].Targets, n)
				}
			}
		})
	}
}
