package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// readers are the clients a real deployment has beside the loop, on every
// decider: a WatchDecisions stream following the namespace's decisions (a
// dashboard; it reconnects at once when the decider ends it, as a client
// would), and a ListDecisions poll of the whole namespace every tick (a
// status page, grpcurl users). The stream is also how the run learns when
// the decider decided each change.
type readers struct {
	// mu guards everything below.
	mu sync.Mutex
	// decisions are the KPA targets' decisions as the watch streams
	// delivered them, by target name, each once (by sequence).
	decisions map[string][]liveDecision
	// watchEnded counts streams the decider ended (too slow, or any other
	// error) while the run wanted them; watchErr is the first such error.
	watchEnded int
	watchErr   error
	received   int
	// lists are the completed listings of the namespace, with their
	// latency; listErrs the failed ones, listErr the first failure.
	lists    []time.Duration
	listErrs int
	listErr  error
}

// liveDecision is one decision a watch delivered: its tick (from the
// sequence), when the stream delivered it, and its desired scale.
type liveDecision struct {
	tick, seen time.Time
	desired    int32
}

func newReaders() *readers { return &readers{decisions: map[string][]liveDecision{}} }

// decider is what the readers need of one decider process.
type decider struct {
	name   string
	client deciderv1.DeciderServiceClient
}

// run starts one watch and one poll per decider; stop ends them and waits.
func (r *readers) run(ctx context.Context, deciders []decider, ns string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, d := range deciders {
		wg.Go(func() { r.watch(ctx, d, ns) })
		wg.Go(func() { r.poll(ctx, d, ns, every) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func (r *readers) watch(ctx context.Context, d decider, ns string) {
	for ctx.Err() == nil {
		st, err := d.client.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: ns})
		for err == nil {
			var resp *deciderv1.WatchDecisionsResponse
			if resp, err = st.Recv(); err == nil {
				r.decision(resp.GetDecision(), time.Now())
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.watchEnded++
		if r.watchErr == nil {
			r.watchErr = fmt.Errorf("%s: %w", d.name, err)
		}
		r.mu.Unlock()
		if status.Code(err) == codes.Unavailable || errors.Is(err, context.DeadlineExceeded) {
			// The decider is going or gone: do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (r *readers) decision(d *commonv1.Decision, seen time.Time) {
	if d.GetDesiredReplicas() < 0 || d.GetSequence() == 0 || d.GetStrategy() != commonv1.Strategy_STRATEGY_KPA {
		return
	}
	tick := time.UnixMilli(int64(d.GetSequence()))
	name := d.GetTarget().GetName()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received++
	ds := r.decisions[name]
	if n := len(ds); n > 0 && !tick.After(ds[n-1].tick) {
		return // a reconnected stream's first decisions repeat what it had
	}
	r.decisions[name] = append(ds, liveDecision{tick: tick, seen: seen, desired: d.GetDesiredReplicas()})
}

// poll lists the namespace's decisions, a page at a time, every period.
func (r *readers) poll(ctx context.Context, d decider, ns string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		err := listAll(ctx, d.client, ns)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err != nil {
			r.listErrs++
			if r.listErr == nil {
				r.listErr = fmt.Errorf("%s: %w", d.name, err)
			}
		} else {
			r.lists = append(r.lists, time.Since(began))
		}
		r.mu.Unlock()
	}
}

func listAll(ctx context.Context, c deciderv1.DeciderServiceClient, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for token := ""; ; {
		resp, err := c.ListDecisions(ctx, &deciderv1.ListDecisionsRequest{Namespace: ns, PageSize: commonv1.MaxPageSize, PageToken: token})
		if err != nil {
			return err
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

// firstDecision is target's first decision a watch delivered.
func (r *readers) firstDecision(target string) (liveDecision, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.decisions[target]
	if len(ds) == 0 {
		return liveDecision{}, false
	}
	return ds[0], true
}
