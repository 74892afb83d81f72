package security

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/identity"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/testkit"
)

// ingest hands the decider, as the collector, a spec and a fresh sample of
// each target, so that its next tick decides them.
func (f *fleet) ingest(ctx context.Context, t *testing.T, refs []*commonv1.TargetRef) {
	t.Helper()
	st, err := deciderv1.NewDeciderServiceClient(f.dial(t, "collector", f.decider)).Ingest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ready := int32(1)
	req := &deciderv1.IngestRequest{CollectorId: "security-test"}
	for i, ref := range refs {
		req.Specs = append(req.Specs, &deciderv1.TargetSpec{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA})
		req.Metrics = append(req.Metrics, &deciderv1.TargetMetrics{Target: ref, Samples: []*commonv1.MetricSample{{
			Time: timestamppb.New(now.Add(-time.Second)), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE,
			AverageConcurrency: float64(100 + i%50), RequestCount: 1, ReadyPods: &ready,
		}}})
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

// watch opens a WatchDecisions stream of ns and waits for its first
// message, the decision the namespace already has: nil means the stream
// got through and stays open until ctx ends.
func watch(ctx context.Context, c deciderv1.DeciderServiceClient, ns string) error {
	s, err := c.WatchDecisions(ctx, &deciderv1.WatchDecisionsRequest{Namespace: ns})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// TestTenantFloods is the issue's cross-tenant attacks on the budgets,
// against the binaries with each attacker's own certificate: a dashboard
// identity bound to two tenants' namespaces floods reads about one, and one
// tenant's many ServiceAccounts open every watch they can of its
// namespace. The floods are refused with RESOURCE_EXHAUSTED naming the
// bound and counted; the other tenant's reads and watches, through the
// shared identity and its own, keep working.
func TestTenantFloods(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	refA := &commonv1.TargetRef{Namespace: tenantA, Name: "web"}
	refB := &commonv1.TargetRef{Namespace: tenantB, Name: "web"}
	f.ingest(ctx, t, []*commonv1.TargetRef{refA, refB})
	reader := deciderv1.NewDeciderServiceClient(f.dial(t, "reader", f.decider))
	testkit.Eventually(t, 30*time.Second, "decisions of both tenants' targets", func() bool {
		_, errA := reader.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: refA})
		_, errB := reader.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: refB})
		return errA == nil && errB == nil
	})

	t.Run("reads", func(t *testing.T) {
		shared := deciderv1.NewDeciderServiceClient(f.dial(t, "shared", f.decider))
		const flood = 300
		passed, refused := 0, 0
		for range flood {
			_, err := shared.ListDecisions(ctx, &deciderv1.ListDecisionsRequest{Namespace: tenantA})
			switch {
			case err == nil:
				passed++
			case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--authz-namespace-read-rate") && strings.Contains(err.Error(), `"team-a"`):
				refused++
			default:
				t.Fatalf("ListDecisions of team-a in the flood: %v, want OK or RESOURCE_EXHAUSTED naming --authz-namespace-read-rate and team-a", err)
			}
		}
		t.Logf("%d reads about team-a through the shared identity: %d passed, %d refused by the namespace's budget", flood, passed, refused)
		if refused == 0 {
			t.Error("no read of the flood refused")
		}
		for i := range 20 {
			if _, err := shared.ListDecisions(ctx, &deciderv1.ListDecisionsRequest{Namespace: tenantB}); err != nil {
				t.Fatalf("read %d about team-b through the shared identity after the flood: %v, want OK", i+1, err)
			}
		}
		own := deciderv1.NewDeciderServiceClient(f.dial(t, "tenant b", f.decider))
		if _, err := own.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: refB}); err != nil {
			t.Errorf("tenant b's own read after the flood: %v, want OK", err)
		}
		if n, err := f.decider.Metric(`tidal_grpc_refused_total{method="/tidal.decider.v1.DeciderService/ListDecisions",reason="namespace_rate_limited",role="other"}`); err != nil || int(n) != refused {
			t.Errorf("refusals counted: %v, %v; want %d", n, err, refused)
		}
	})

	t.Run("watches", func(t *testing.T) {
		// Ten ServiceAccounts of team-a, each with the certificate a
		// workload identity gives it, open six watches each.
		const accounts, each = 10, 6
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		held := 0
		reasons := map[string]int{}
		for i := range accounts {
			name := fmt.Sprintf("team-a sa-%d", i)
			f.issue(t, name, identity.MustNew(trustDomain, tenantA, fmt.Sprintf("sa-%d", i)))
			c := deciderv1.NewDeciderServiceClient(f.dial(t, name, f.decider))
			for range each {
				err := watch(wctx, c, tenantA)
				switch {
				case err == nil:
					held++
				case status.Code(err) != codes.ResourceExhausted:
					t.Fatalf("a watch of team-a by %s: %v, want it held or RESOURCE_EXHAUSTED", name, err)
				case strings.Contains(err.Error(), "--authz-namespace-watches-per-caller"):
					reasons["per caller"]++
				case strings.Contains(err.Error(), "--authz-namespace-watches)"):
					reasons["per namespace"]++
				default:
					t.Fatalf("a watch of team-a by %s: %v, want the refusal to name the bound", name, err)
				}
			}
		}
		t.Logf("%d watches of team-a from %d identities: %d held, refused %v", accounts*each, accounts, held, reasons)
		// 4 per identity (--authz-namespace-watches-per-caller) until
		// the namespace holds 32 (--authz-namespace-watches).
		if held != 32 || reasons["per caller"] != 8*(each-4) || reasons["per namespace"] != 2*each {
			t.Errorf("held %d, refused %v; want 32 held, %d refused per caller and %d per namespace", held, reasons, 8*(each-4), 2*each)
		}
		for _, w := range []struct{ caller, ns string }{{"tenant b", tenantB}, {"shared", tenantB}, {"reader", ""}} {
			if err := watch(wctx, deciderv1.NewDeciderServiceClient(f.dial(t, w.caller, f.decider)), w.ns); err != nil {
				t.Errorf("a watch of %q by %s while team-a's are full: %v, want it held", w.ns, w.caller, err)
			}
		}
		tenant := deciderv1.NewDeciderServiceClient(f.dial(t, "tenant", f.decider))
		if err := watch(wctx, tenant, tenantA); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("one more watch of team-a: %v, want RESOURCE_EXHAUSTED", err)
		}
		// Ending the flood frees team-a's places.
		wcancel()
		testkit.Eventually(t, 30*time.Second, "a watch of team-a after the flood ended", func() bool {
			return watch(ctx, tenant, tenantA) == nil
		})
	})
}
