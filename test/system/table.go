package system

import (
	"fmt"
	"io"
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
			observed = fmt.Sprintf("%.1f", s.Observed())
		}
	}
	num := func(v int32) string {
		if v < 0 {
			return "-"
		}
		return strconv.Itoa(int(v))
	}
	fmt.Fprintf(w, "  %7.1fs  %-16s %7.1f  %9s  %8s  %8s  %5s  %s\n",
		s.Time.Sub(start).Seconds(), clip(target, 16), s.Load, observed, desired, num(s.Replicas), num(s.Ready), s.State())
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
