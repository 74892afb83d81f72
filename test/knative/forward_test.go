package knative

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tidalscale/tidal/collector/activator"
	"github.com/tidalscale/tidal/collector/dispatch"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/knative/knactivator"
	"github.com/tidalscale/tidal/test/testkit"
)

// replica is one collector's activator side in-process: its hub, its
// websocket endpoint and its ActivatorStatService, wired as the binary
// wires them but with an ownership function instead of bucket Leases.
type replica struct {
	hub  *dispatch.Hub
	url  string
	addr string // gRPC
}

// grpcPeers is activator.Peers over loopback gRPC.
type grpcPeers struct{}

func (grpcPeers) ForwardActivatorStats(ctx context.Context, addr string, req *collectorv1.ForwardActivatorStatsRequest) (*collectorv1.ForwardActivatorStatsResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return collectorv1.NewActivatorStatServiceClient(conn).ForwardActivatorStats(ctx, req)
}

func startReplica(t *testing.T, owners activator.Owners) *replica {
	t.Helper()
	var cfg activator.Config
	fs := flag.NewFlagSet("replica", flag.ContinueOnError)
	cfg.RegisterFlagsWithPrefix("activator-", fs)
	if err := fs.Parse([]string{"--activator-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate("activator-"); err != nil {
		t.Fatal(err)
	}
	reg, log := prometheus.NewRegistry(), zap.NewNop()
	r := &replica{hub: dispatch.New(dispatch.Config{Retention: time.Minute, HighWater: 1 << 20}, dispatch.NewMetrics(reg), log)}
	m := activator.NewMetrics(reg)
	local := activator.HubRecorder{Hub: r.hub, Implicit: true, Wait: cfg.BacklogWait}
	fwd := activator.NewForwarder(cfg, grpcPeers{}, m, log)
	srv := activator.New(cfg, activator.NewRouter(activator.RevisionDeployment, owners, local, fwd, m, log), m, log)
	wsAddr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	r.url = "ws://" + wsAddr.String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	gs := grpc.NewServer()
	collectorv1.RegisterActivatorStatServiceServer(gs, activator.NewPeerService(owners, local, m, time.Now))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { _ = fwd.Run(ctx); done <- struct{}{} }()
	go func() { _ = srv.Run(ctx); done <- struct{}{} }()
	go func() { _ = gs.Serve(ln); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		for range 3 {
			<-done
		}
	})
	return r
}

func (r *replica) samples(key string) []*commonv1.MetricSample {
	for _, w := range r.hub.Targets("") {
		if w.Target.Key() == key {
			return w.Samples
		}
	}
	return nil
}

// TestNonOwnerForwardsToTheOwner: activators dial one Service, so a
// revision's stats may reach a replica that does not own it. Knative's
// activator reports to replica a only; revisions named b-... belong to
// replica b, and their stats arrive in b's hub (and not a's) through a's
// forward, a's own in a's.
func TestNonOwnerForwardsToTheOwner(t *testing.T) {
	t.Parallel()
	var a, b *replica
	owner := func(ref *commonv1.TargetRef) *replica {
		if strings.HasPrefix(ref.GetName(), "b-") {
			return b
		}
		return a
	}
	a = startReplica(t, func(ref *commonv1.TargetRef) (string, bool) { o := owner(ref); return o.addr, o == a })
	b = startReplica(t, func(ref *commonv1.TargetRef) (string, bool) { o := owner(ref); return o.addr, o == b })

	act := knactivator.Start(t, a.url, "activator-forward")
	act.WaitReady(t, 10*time.Second)
	act.Send(knactivator.Stat("shop", "a-00001", "activator-forward", 1.5, 2), knactivator.Stat("shop", "b-00001", "activator-forward", 2.5, 3))
	// And the first-request stat of a b revision, from Knative's reporter.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go act.Request(ctx, "shop", "b-00002")

	var bs, bs2, as []*commonv1.MetricSample
	testkit.Eventually(t, 10*time.Second, "samples of all three revisions in their owners' hubs", func() bool {
		bs, bs2, as = b.samples("shop/b-00001-deployment"), b.samples("shop/b-00002-deployment"), a.samples("shop/a-00001-deployment")
		return len(bs) > 0 && len(bs2) > 0 && len(as) > 0
	}, func() string {
		return fmt.Sprintf("b holds %d and %d samples of its revisions, a %d of its own; want all", len(bs), len(bs2), len(as))
	})
	if bs[0].GetAverageConcurrency() != 2.5 || bs[0].GetRequestCount() != 3 {
		t.Errorf("b's sample = %v, want concurrency 2.5 and 3 requests", bs[0])
	}
	if bs2[0].GetAverageConcurrency() != 1 || bs2[0].GetRequestCount() != 1 {
		t.Errorf("b's first-request sample = %v, want concurrency 1 and 1 request", bs2[0])
	}
	if as[0].GetAverageConcurrency() != 1.5 {
		t.Errorf("a's sample = %v, want concurrency 1.5", as[0])
	}
	if a.samples("shop/b-00001-deployment") != nil || b.samples("shop/a-00001-deployment") != nil {
		t.Error("a replica holds a target it does not own")
	}
}
