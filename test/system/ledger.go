package system

import (
	"fmt"
	"time"

	"github.com/tidalscale/tidal/test/workload"
)

// Ledger keeps a target's samples and what they cost: pod-seconds (ready
// pods integrated over time) and cold starts (scale-ups from zero ready
// pods), so a strategy can be judged by cost next to what users felt.
type Ledger struct {
	Samples []Sample
	// PodSeconds integrates ready pods over the sampled time (each sample's
	// count holds until the next sample).
	PodSeconds float64
	// ColdStarts counts the times ready pods went from 0 to more.
	ColdStarts int
}

// Add records a sample taken after the previous one.
func (l *Ledger) Add(s Sample) {
	if n := len(l.Samples); n > 0 {
		prev := l.Samples[n-1]
		if prev.Ready > 0 {
			l.PodSeconds += float64(prev.Ready) * s.Time.Sub(prev.Time).Seconds()
		}
		if prev.Ready == 0 && s.Ready > 0 {
			l.ColdStarts++
		}
	}
	l.Samples = append(l.Samples, s)
}

// Experience is what users of a KPA workload felt, next to what it cost.
type Experience struct {
	Report     workload.Report
	PodSeconds float64
	ColdStarts int
}

// String is one line for logs and the run's summary.
func (e Experience) String() string {
	r := e.Report
	return fmt.Sprintf("requests: %d arrived, %d served, %d queued now; wait p50 %s, p99 %s, max %s; cold starts %d; cost %.0f pod-seconds",
		r.Arrived, r.Served, r.Queued, round(r.Wait.P50), round(r.Wait.P99), round(r.Wait.Max), e.ColdStarts, e.PodSeconds)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d
}

// Experience summarises the KPA workload's users' view and its cost.
func (k *KPATarget) Experience(l *Ledger) Experience {
	return Experience{Report: k.Workload.Report(), PodSeconds: l.PodSeconds, ColdStarts: l.ColdStarts}
}
