// Command benchratio reads `go test -bench` output on stdin and prints, for
// every benchmark pair, each side's figures next to Knative's and their
// ratio. A pair is the benchmarks whose names differ only in the last
// element: ".../knative" is the baseline, and every other last element
// (".../tidal", ".../tidal-cached") is compared with it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

const baseline = "knative"

// metric is one "value unit" pair of a benchmark line.
type metric struct {
	unit  string
	value float64
}

// result is one benchmark line.
type result struct {
	pair, side string
	metrics    []metric
}

func main() {
	results, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
	if n := write(os.Stdout, results); n == 0 {
		fmt.Fprintln(os.Stderr, "benchratio: no pairs with a knative side in the input")
		os.Exit(1)
	}
}

// parse reads the benchmark lines: a name, an iteration count, then value
// and unit pairs. Other lines are ignored.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		// Drop the -GOMAXPROCS suffix go test adds.
		if i := strings.LastIndexByte(name, '-'); i > strings.LastIndexByte(name, '/') {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			continue
		}
		res := result{pair: strings.TrimPrefix(name[:i], "Benchmark"), side: name[i+1:]}
		for k := 2; k+1 < len(f); k += 2 {
			v, err := strconv.ParseFloat(f[k], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", f[0], f[k], err)
			}
			res.metrics = append(res.metrics, metric{unit: f[k+1], value: v})
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// write prints one row per pair, side and metric that both the side and
// Knative report as more than zero (a ratio to or of zero says nothing), and
// returns the number of rows.
func write(w io.Writer, results []result) int {
	base := map[string]result{}
	for _, r := range results {
		if r.side == baseline {
			base[r.pair] = r
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pair\tside\tmetric\tknative\tside's\tside / knative\t")
	rows := 0
	for _, r := range results {
		k, ok := base[r.pair]
		if r.side == baseline || !ok {
			continue
		}
		for _, m := range r.metrics {
			kv, found := lookup(k.metrics, m.unit)
			if !found || kv <= 0 || m.value <= 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.3f\t\n", r.pair, r.side, m.unit, num(kv), num(m.value), m.value/kv)
			rows++
		}
	}
	_ = tw.Flush()
	return rows
}

func lookup(ms []metric, unit string) (float64, bool) {
	for _, m := range ms {
		if m.unit == unit {
			return m.value, true
		}
	}
	return 0, false
}

// num prints a figure with about four significant digits.
func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}
