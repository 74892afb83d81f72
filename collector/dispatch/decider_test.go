package dispatch

import (
	"errors"
	"io"
	"sort"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// fakeDecider is a real DeciderService on loopback that applies Ingest
// batches the way the contract says a decider must: the first replayed batch
// for a target on a stream replaces what it held, later ones append, live
// batches append, removed targets are forgotten. Its state per target is the
// per-second sums of what it received — the input of every window.
type fakeDecider struct {
	deciderv1.UnimplementedDeciderServiceServer
	addr string
	stop func()

	// block, when set, makes Ingest stop reading until closed.
	block chan struct{}

	mu       sync.Mutex
	state    map[string]*targetState
	batches  []*deciderv1.IngestRequest
	streams  int
	received chan struct{}
}

type targetState struct {
	spec    *deciderv1.TargetSpec
	seconds map[int64]float64 // Unix second → concurrency sum
	ready   map[int64]int32
	samples int
	errMsg  string
}

// startDecider serves a fakeDecider on addr ("" for a free port) until t
// ends or its stop.
func startDecider(t testing.TB, addr string) *fakeDecider {
	t.Helper()
	d := &fakeDecider{state: map[string]*targetState{}, received: make(chan struct{}, 1)}
	d.addr, d.stop = testkit.ServeDecider(t, d, addr)
	return d
}

func (d *fakeDecider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	d.mu.Lock()
	d.streams++
	block := d.block
	d.mu.Unlock()
	replaced := map[string]bool{} // targets replaced on this stream
	var accepted int64
	for {
		if block != nil {
			select {
			case <-block:
			case <-st.Context().Done():
				return st.Context().Err()
			}
		}
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&deciderv1.IngestResponse{AcceptedSamples: accepted})
		}
		if err != nil {
			return err
		}
		if err := req.Validate(); err != nil {
			return err
		}
		d.mu.Lock()
		d.batches = append(d.batches, proto.CloneOf(req))
		for _, s := range req.GetSpecs() {
			d.entryLocked(s.GetTarget().Key()).spec = s
		}
		for _, m := range req.GetMetrics() {
			key := m.GetTarget().Key()
			if req.GetReplay() && !replaced[key] {
				replaced[key] = true
				spec := d.entryLocked(key).spec
				d.state[key] = &targetState{spec: spec, seconds: map[int64]float64{}, ready: map[int64]int32{}}
			}
			ts := d.entryLocked(key)
			ts.errMsg = m.GetMeasureError()
			for _, s := range m.GetSamples() {
				sec := s.GetTime().AsTime().Unix()
				ts.seconds[sec] += s.GetAverageConcurrency()
				if s.ReadyPods != nil {
					ts.ready[sec] = s.GetReadyPods()
				}
				ts.samples++
				accepted++
			}
		}
		for _, r := range req.GetRemoved() {
			delete(d.state, r.Key())
		}
		d.mu.Unlock()
		select {
		case d.received <- struct{}{}:
		default:
		}
	}
}

func (d *fakeDecider) entryLocked(key string) *targetState {
	ts, ok := d.state[key]
	if !ok {
		ts = &targetState{seconds: map[int64]float64{}, ready: map[int64]int32{}}
		d.state[key] = ts
	}
	return ts
}

// window returns the per-second sums of key from second from on, sorted.
func (d *fakeDecider) window(key string, from int64) ([]int64, []float64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ts, ok := d.state[key]
	if !ok {
		return nil, nil, false
	}
	var secs []int64
	for s := range ts.seconds {
		if s >= from {
			secs = append(secs, s)
		}
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	vals := make([]float64, len(secs))
	for i, s := range secs {
		vals[i] = ts.seconds[s]
	}
	return secs, vals, true
}

func (d *fakeDecider) keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ks []string
	for k := range d.state {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (d *fakeDecider) takeBatches() []*deciderv1.IngestRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.batches
	d.batches = nil
	return b
}

var _ = commonv1.Strategy_STRATEGY_KPA
