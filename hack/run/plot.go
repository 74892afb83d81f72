package main

import (
	"time"

	"github.com/tidalscale/tidal/sim/timeplot"
	"github.com/tidalscale/tidal/test/system"
)

// series is one target's samples for the plot.
type series struct {
	name     string
	loadUnit string // "requests/s" or "records/s"
	samples  []system.Sample
}

// writePlot draws, per target, the offered load (and what the decider
// observed) above the desired and ready replicas, over the same time axis,
// into a PNG at path (sim/timeplot, which tidal-sim draws with too).
func writePlot(path string, start time.Time, targets []series) error {
	out := make([]timeplot.Series, 0, len(targets))
	for _, t := range targets {
		s := timeplot.Series{Name: t.name, LoadUnit: t.loadUnit}
		for _, x := range t.samples {
			p := timeplot.Point{Seconds: x.Time.Sub(start).Seconds(), Load: x.Load, Desired: -1, Ready: x.Ready}
			if x.Known && x.State() != "no-data" && x.State() != "error" {
				p.Observed, p.HasObserved = x.Observed(), true
			}
			if x.Known && x.Desired >= 0 {
				p.Desired = x.Desired
			}
			s.Points = append(s.Points, p)
		}
		out = append(out, s)
	}
	return timeplot.Write(path, out)
}
