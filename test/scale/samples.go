package scale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/pbconv"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// samplePoller keeps every sample the collectors took of some targets, as
// their GetWindow shows it: the samples the deciders were sent, which the
// run replays offline through decider/engine to learn when the strategy
// itself would have decided each load change (replayStrategy). A window
// holds the collector's history (--history, 2 minutes by default), so a
// poll every samplePollEvery misses nothing while a round of polls takes
// less than the rest of the history; gaps count any that did not reach
// back to the last sample kept, which the replay then lacks.
type samplePoller struct {
	// mu guards samples, polls, the gaps and the errors.
	mu sync.Mutex
	// samples are each target's samples in time order, by target name.
	samples  map[string][]engine.Sample
	polls    int
	errs     int
	firstErr error
	// gaps counts windows whose oldest sample came after the last one
	// kept, and missed how long those gaps were in all; longest is the
	// longest round of polls.
	gaps    int
	missed  time.Duration
	longest time.Duration
}

// WindowReads is how a run read the samples it replays (Report.Windows).
type WindowReads struct {
	Reads, Gaps     int
	Longest, Missed time.Duration
}

// samplePollEvery is how often every polled target's window is read: half
// the collector's default history, so consecutive windows overlap.
const samplePollEvery = time.Minute

// samplePollers is how many window reads are in flight at once.
const samplePollers = 4

func newSamplePoller() *samplePoller { return &samplePoller{samples: map[string][]engine.Sample{}} }

// collector is what the poller needs of one collector process.
type collector struct {
	name   string
	client collectorv1.CollectorServiceClient
}

// run polls targets' windows now and every samplePollEvery until ctx ends;
// stop ends it after one last poll, so the samples reach the end.
func (p *samplePoller) run(ctx context.Context, collectors []collector, ns string, targets []string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(samplePollEvery)
		defer t.Stop()
		for {
			p.pollAll(ctx, collectors, ns, targets)
			select {
			case <-ctx.Done():
				return
			case <-done:
				p.pollAll(ctx, collectors, ns, targets)
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

// pollAll reads every target's window with a few calls in flight, asking
// the collector that answered last for it first.
func (p *samplePoller) pollAll(ctx context.Context, collectors []collector, ns string, targets []string) {
	began := time.Now()
	defer func() {
		p.mu.Lock()
		p.longest = max(p.longest, time.Since(began))
		p.mu.Unlock()
	}()
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range samplePollers {
		wg.Go(func() {
			for name := range jobs {
				p.poll(ctx, collectors, ns, name)
			}
		})
	}
	for _, name := range targets {
		select {
		case jobs <- name:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
}

func (p *samplePoller) poll(ctx context.Context, collectors []collector, ns, name string) {
	ref := &commonv1.TargetRef{Namespace: ns, Name: name, ApiVersion: "apps/v1", Kind: "Deployment"}
	var err error
	for _, c := range collectors {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var resp *collectorv1.GetWindowResponse
		resp, err = c.client.GetWindow(cctx, &collectorv1.GetWindowRequest{Target: ref})
		cancel()
		if err == nil {
			p.add(name, resp.GetSamples())
			return
		}
		err = fmt.Errorf("%s: %w", c.name, err)
	}
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs++
	if p.firstErr == nil {
		p.firstErr = fmt.Errorf("window of %s: %w", name, err)
	}
}

// add appends the samples newer than the last one kept (a pod count and a
// measurement may share a time: both are kept).
func (p *samplePoller) add(name string, ms []*commonv1.MetricSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls++
	have := p.samples[name]
	var last time.Time
	if n := len(have); n > 0 {
		last = have[n-1].At
		if len(ms) > 0 {
			if oldest := pbconv.Sample(ms[0]).At; oldest.After(last) {
				p.gaps++
				p.missed += oldest.Sub(last)
			}
		}
	}
	for _, m := range ms {
		if s := pbconv.Sample(m); s.At.After(last) {
			have = append(have, s)
		}
	}
	p.samples[name] = have
}
