package kedascaler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// fakeDecider serves GetDecision from a table and WatchDecisions streams a
// test feeds, counting the open streams by namespace.
type fakeDecider struct {
	deciderv1.UnimplementedDeciderServiceServer

	mu sync.Mutex
	// decisions by target key; errs makes GetDecision fail.
	decisions map[string]*commonv1.Decision
	errs      map[string]error
	// block makes GetDecision wait for its caller's deadline.
	block bool
	// streams are the open watches: each receives what publish sends, and
	// ends with the error sent on its end channel.
	streams map[*fakeStream]struct{}
	opened  int
}

type fakeStream struct {
	namespace string
	send      chan *commonv1.Decision
	end       chan error
}

func newFakeDecider() *fakeDecider {
	return &fakeDecider{decisions: map[string]*commonv1.Decision{}, errs: map[string]error{}, streams: map[*fakeStream]struct{}{}}
}

func (d *fakeDecider) GetDecision(ctx context.Context, req *deciderv1.GetDecisionRequest) (*deciderv1.GetDecisionResponse, error) {
	d.mu.Lock()
	block := d.block
	key := req.GetTarget().Key()
	dec, err := d.decisions[key], d.errs[key]
	d.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if dec == nil {
		return nil, status.Errorf(codes.NotFound, "target %s: this decider holds no such target", key)
	}
	return &deciderv1.GetDecisionResponse{Decision: dec}, nil
}

func (d *fakeDecider) WatchDecisions(req *deciderv1.WatchDecisionsRequest, st grpc.ServerStreamingServer[deciderv1.WatchDecisionsResponse]) error {
	s := &fakeStream{namespace: req.GetNamespace(), send: make(chan *commonv1.Decision, 16), end: make(chan error, 1)}
	d.mu.Lock()
	d.streams[s] = struct{}{}
	d.opened++
	// The snapshot: the latest decision of each target in the namespace.
	var snapshot []*commonv1.Decision
	for _, dec := range d.decisions {
		if dec.GetTarget().GetNamespace() == s.namespace {
			snapshot = append(snapshot, dec)
		}
	}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.streams, s)
		d.mu.Unlock()
	}()
	for _, dec := range snapshot {
		if err := st.Send(&deciderv1.WatchDecisionsResponse{Decision: dec}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case err := <-s.end:
			return err
		case dec := <-s.send:
			if err := st.Send(&deciderv1.WatchDecisionsResponse{Decision: dec}); err != nil {
				return err
			}
		}
	}
}

// publish records a decision and sends it on the watches of its namespace.
func (d *fakeDecider) publish(ref *commonv1.TargetRef, seq uint64, desired int32) {
	dec := &commonv1.Decision{Target: ref, Sequence: seq, DesiredReplicas: desired}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.decisions[ref.Key()] = dec
	for s := range d.streams {
		if s.namespace == "" || s.namespace == ref.GetNamespace() {
			s.send <- dec
		}
	}
}

// open counts the open watches of a namespace.
func (d *fakeDecider) open(namespace string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for s := range d.streams {
		if s.namespace == namespace {
			n++
		}
	}
	return n
}

// breakStreams ends every open watch with err.
func (d *fakeDecider) breakStreams(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := range d.streams {
		s.end <- err
	}
}

// startDecider serves d on loopback and returns its address and a
// connection to it.
func startDecider(t *testing.T, d *fakeDecider) (string, *grpc.ClientConn) {
	t.Helper()
	addr, _ := testkit.ServeDecider(t, d, "")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return addr, conn
}

// fakeRouter routes targets by a table the test changes.
type fakeRouter struct {
	mu    sync.Mutex
	owner map[string]string // target key → decider address
	conns map[string]*grpc.ClientConn
}

func (r *fakeRouter) Owner(ref *commonv1.TargetRef) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.owner[ref.Key()]
	return a, ok
}

func (r *fakeRouter) Conn(addr string) (grpc.ClientConnInterface, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.conns[addr]
	if !ok {
		return nil, false
	}
	return c, true
}

func (r *fakeRouter) route(ref *commonv1.TargetRef, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owner[ref.Key()] = addr
}

// runRemote runs a Remote until the test ends, and checks Run returns.
func runRemote(t *testing.T, cfg Config, router Router) *Remote {
	t.Helper()
	r := NewRemote(cfg, router, prometheus.NewRegistry(), zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	testkit.Eventually(t, 5*time.Second, "Run to start", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ctx != nil
	})
	return r
}

var (
	refA = &commonv1.TargetRef{Namespace: "shop", Name: "a"}
	refB = &commonv1.TargetRef{Namespace: "shop", Name: "b"}
	refC = &commonv1.TargetRef{Namespace: "other", Name: "c"}
)

func TestLatest(t *testing.T) {
	dec := newFakeDecider()
	addr, conn := startDecider(t, dec)
	router := &fakeRouter{owner: map[string]string{}, conns: map[string]*grpc.ClientConn{addr: conn}}
	cfg := testConfig()
	cfg.CallTimeout = 200 * time.Millisecond
	r := NewRemote(cfg, router, prometheus.NewRegistry(), zap.NewNop())
	ctx := context.Background()

	known := &commonv1.TargetRef{Namespace: "shop", Name: "known"}
	early := &commonv1.TargetRef{Namespace: "shop", Name: "early"}
	broken := &commonv1.TargetRef{Namespace: "shop", Name: "broken"}
	unknown := &commonv1.TargetRef{Namespace: "shop", Name: "unknown"}
	unrouted := &commonv1.TargetRef{Namespace: "shop", Name: "unrouted"}
	elsewhere := &commonv1.TargetRef{Namespace: "shop", Name: "elsewhere"}
	dec.publish(known, 5, 3)
	dec.publish(early, 1, -1)
	dec.errs[broken.Key()] = status.Error(codes.Internal, "engine\nexploded")
	for _, ref := range []*commonv1.TargetRef{known, early, broken, unknown} {
		router.route(ref, addr)
	}
	router.route(elsewhere, "10.9.9.9:9002")

	d, err := r.Latest(ctx, known)
	if err != nil || d.GetDesiredReplicas() != 3 || d.GetSequence() != 5 {
		t.Errorf("Latest(known) = %v, %v; want desired 3", d, err)
	}
	for _, tt := range []struct {
		name string
		ref  *commonv1.TargetRef
		want error
	}{
		{"no decision yet", early, ErrNoDecision},
		{"a decider's error", broken, ErrUnavailable},
		{"no such target", unknown, ErrUnknownTarget},
		{"no decider known", unrouted, ErrUnavailable},
		{"no connection to the owner", elsewhere, ErrUnavailable},
	} {
		if _, err := r.Latest(ctx, tt.ref); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		} else if tt.ref == broken && (len(err.Error()) > 400 || containsControl(err.Error())) {
			t.Errorf("%s: error %q is not bounded and printable", tt.name, err)
		}
	}
	// A decider that does not answer: KEDA has no deadline, tidal does.
	dec.mu.Lock()
	dec.block = true
	dec.mu.Unlock()
	start := time.Now()
	if _, err := r.Latest(ctx, known); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a hung decider: %v, want ErrUnavailable", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("a hung decider held the call %s, want about the call timeout", waited)
	}
}

func containsControl(s string) bool {
	for _, r := range s {
		if r < 0x20 {
			return true
		}
	}
	return false
}

func TestWatchSharesAStreamAndFollowsTheOwner(t *testing.T) {
	decA, decB := newFakeDecider(), newFakeDecider()
	addrA, connA := startDecider(t, decA)
	addrB, connB := startDecider(t, decB)
	router := &fakeRouter{owner: map[string]string{}, conns: map[string]*grpc.ClientConn{addrA: connA, addrB: connB}}
	router.route(refA, addrA)
	router.route(refB, addrA)
	decA.publish(refA, 1, 2)
	r := runRemote(t, testConfig(), router)

	wa, err := r.Watch(refA)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := r.Watch(refB)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "a's decision from the snapshot", func() bool { return wa.Decision().GetSequence() == 1 })
	if n := decA.open("shop"); n != 1 {
		t.Errorf("decider A has %d watches of shop, want 1 shared by both", n)
	}
	decA.publish(refB, 2, 4)
	<-wb.Changed()
	if d := wb.Decision(); d.GetDesiredReplicas() != 4 {
		t.Errorf("b's decision %v, want desired 4", d)
	}
	if wa.Decision().GetSequence() != 1 {
		t.Errorf("a got b's decision: %v", wa.Decision())
	}

	// a moves to decider B (a decider joined): its watch follows.
	router.route(refA, addrB)
	testkit.Eventually(t, 5*time.Second, "a watch of shop on decider B", func() bool { return decB.open("shop") == 1 })
	decB.publish(refA, 3, 0)
	testkit.Eventually(t, 5*time.Second, "a's decision from decider B", func() bool { return wa.Decision().GetSequence() == 3 })
	if n := decA.open("shop"); n != 1 {
		t.Errorf("decider A has %d watches of shop, want 1 (b's)", n)
	}
	wb.Close()
	testkit.Eventually(t, 5*time.Second, "decider A's watch to end with its last watcher", func() bool { return decA.open("shop") == 0 })
	wa.Close()
	wa.Close() // twice is harmless
	testkit.Eventually(t, 5*time.Second, "decider B's watch to end", func() bool { return decB.open("shop") == 0 })
}

func TestWatchReopensABrokenStream(t *testing.T) {
	dec := newFakeDecider()
	addr, conn := startDecider(t, dec)
	router := &fakeRouter{owner: map[string]string{refA.Key(): addr}, conns: map[string]*grpc.ClientConn{addr: conn}}
	r := runRemote(t, testConfig(), router)
	w, err := r.Watch(refA)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	testkit.Eventually(t, 5*time.Second, "the watch", func() bool { return dec.open("shop") == 1 })
	dec.breakStreams(status.Error(codes.ResourceExhausted, "watcher too slow"))
	testkit.Eventually(t, 5*time.Second, "the watch to be reopened", func() bool {
		dec.mu.Lock()
		defer dec.mu.Unlock()
		return dec.opened == 2 && len(dec.streams) == 1
	})
	dec.publish(refA, 7, 1)
	testkit.Eventually(t, 5*time.Second, "a decision on the reopened watch", func() bool { return w.Decision().GetSequence() == 7 })
}

func TestWatchBounds(t *testing.T) {
	dec := newFakeDecider()
	addr, conn := startDecider(t, dec)
	router := &fakeRouter{owner: map[string]string{refA.Key(): addr, refB.Key(): addr, refC.Key(): addr}, conns: map[string]*grpc.ClientConn{addr: conn}}
	cfg := testConfig()
	cfg.MaxWatches = 1
	unstarted := NewRemote(cfg, router, prometheus.NewRegistry(), zap.NewNop())
	if _, err := unstarted.Watch(refA); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Watch before Run: %v, want ErrUnavailable", err)
	}
	r := runRemote(t, cfg, router)
	wa, err := r.Watch(refA)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	wb, err := r.Watch(refB) // the same namespace: the same stream
	if err != nil {
		t.Fatalf("a second watch of the namespace: %v", err)
	}
	defer wb.Close()
	if _, err := r.Watch(refC); !errors.Is(err, ErrTooManyWatches) {
		t.Errorf("a watch of another namespace beyond the bound: %v, want ErrTooManyWatches", err)
	}
}

// TestOfferKeepsTheNewest: a decision older than the one held (from a
// decider that lags, or a snapshot after a reconnect) changes nothing and
// wakes no one.
func TestOfferKeepsTheNewest(t *testing.T) {
	r := NewRemote(testConfig(), &fakeRouter{}, prometheus.NewRegistry(), zap.NewNop())
	w := &watch{r: r, changed: make(chan struct{}, 1)}
	r.watches[w] = struct{}{}
	w.offer(&commonv1.Decision{Sequence: 3, DesiredReplicas: 1})
	<-w.Changed()
	w.offer(&commonv1.Decision{Sequence: 2, DesiredReplicas: 9})
	w.offer(&commonv1.Decision{Sequence: 3, DesiredReplicas: 9})
	select {
	case <-w.Changed():
		t.Error("an older decision signalled a change")
	default:
	}
	if d := w.Decision(); d.GetSequence() != 3 || d.GetDesiredReplicas() != 1 {
		t.Errorf("Decision = %v, want sequence 3", d)
	}
	w.Close()
	if len(r.watches) != 0 {
		t.Error("a closed watch is still checked for its owner")
	}
	w.offer(&commonv1.Decision{Sequence: 4})
	if w.Decision().GetSequence() != 3 {
		t.Error("a closed watch took a decision")
	}
}
