package system

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// TableHeader is the header of the live table WriteRow prints.
const TableHeader = "  time      target            load/s   observed   desired  replicas  ready  state"

// WriteRow prints one Sample as a table row: the time since start, the
// target, the offered load, the observed concurrency (KPA, panic window) or
// total lag, the decider's desired scale, the Deployment's replicas and
// ready pods, and the strategy's state.
func WriteRow(w io.Writer, start time.Time, target string, s Sample) {
	desired := "-"
	if s.Known && s.Desired >= 0 {
		desired = strconv.Itoa(int(s.Desired))
	}
	observed := "-"
	if s.Known {
		if s.Lag != nil {
			observed = fmt.Sprintf("lag %d", s.Lag.GetTotalLag())
		} else {
			observed = oneDecimal(s.Observed())
		}
	}
	num := func(v int32) string {
		if v < 0 {
			return "-"
		}
		return strconv.Itoa(int(v))
	}
	fmt.Fprintf(w, "  %7.1fs  %-16s %7s  %9s  %8s  %8s  %5s  %s\n",
		s.Time.Sub(start).Seconds(), clip(target, 16), oneDecimal(s.Load), observed, desired, num(s.Replicas), num(s.Ready), s.State())
}

// oneDecimal formats v with one decimal; a value that rounds to zero is
// "0.0", never "-0.0".
func oneDecimal(v float64) string {
	r := math.Round(v*10) / 10
	if r == 0 {
		r = 0 // drops the sign of -0
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// PhaseAt returns which of a script's phases runs at elapsed: the last
// whose start (starts, ascending) has passed, the script repeating every
// cycle. Both `make run` scenes drive their load this way.
func PhaseAt(elapsed, cycle time.Duration, starts []time.Duration) int {
	e := elapsed % cycle
	p := 0
	for i, at := range starts {
		if at <= e {
			p = i
		}
	}
	return p
}
