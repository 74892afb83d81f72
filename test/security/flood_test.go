package security

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/test/system"
)

// floodTargets is how many distinct targets the flood names; the issue's
// attack pushed 550,000 and asked for a million.
const floodTargets = 1_000_000

// Bounds on the resident memory of the collector and the decider after the
// flood. Both hold at most --max-targets (50,000 by default) targets; each
// costs the collector about 1 KB and the decider about 4 KB, on top of a
// baseline of some tens of MB.
const (
	collectorRSSBound = 256 << 20
	deciderRSSBound   = 512 << 20
)

// TestFloodOfPushedTargets is the attack of issue 14 on a collector that
// makes a target of anything pushed (--discovery=push): a pusher names a
// million distinct targets. The collector takes them until it holds
// --max-targets, refuses the rest with RESOURCE_EXHAUSTED, and neither it
// nor the decider it streams to grows past a bound.
func TestFloodOfPushedTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("a million pushed targets")
	}
	f := startFleet(t)
	client := collectorv1.NewCollectorServiceClient(f.dial(t, "pusher", f.collector))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const batch = 5000
	var accepted, refused, throttled int
	start := time.Now()
	for i := 0; i < floodTargets; {
		stats := make([]*collectorv1.Stat, batch)
		for j := range stats {
			stats[j] = &collectorv1.Stat{
				Target:             &commonv1.TargetRef{Namespace: "flood", Name: "t-" + strconv.Itoa(i+j)},
				PodName:            "attacker",
				AverageConcurrency: 1,
				RequestCount:       1,
			}
		}
		_, err := client.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: stats})
		switch code := status.Code(err); {
		case err == nil:
			accepted += batch
		case code == codes.ResourceExhausted && strings.Contains(err.Error(), "max-targets"):
			refused += batch
		case code == codes.ResourceExhausted:
			// The per-identity rate for mutating calls: wait and retry.
			throttled++
			time.Sleep(50 * time.Millisecond)
			continue
		default:
			t.Fatalf("push of targets %d..%d: %v", i, i+batch-1, err)
		}
		i += batch
	}
	t.Logf("pushed %d distinct targets in %s: %d accepted, %d refused at the target limit; %d calls throttled",
		floodTargets, time.Since(start).Round(time.Millisecond), accepted, refused, throttled)
	if accepted == 0 || accepted > 50_000 {
		t.Errorf("accepted %d targets, want some and at most --max-targets (50,000)", accepted)
	}
	if refused == 0 {
		t.Error("no push refused at the target limit")
	}

	// The collector still serves, and lists at most its bound.
	resp, err := client.ListTargets(ctx, &collectorv1.ListTargetsRequest{PageSize: 1})
	if err != nil {
		t.Fatalf("ListTargets after the flood: %v", err)
	}
	if len(resp.GetTargets()) != 1 || resp.GetNextPageToken() == "" {
		t.Errorf("ListTargets after the flood: %d targets, next %q; want a page of 1 and more", len(resp.GetTargets()), resp.GetNextPageToken())
	}
	// Give the decider time to take the specs the collector streamed.
	time.Sleep(3 * time.Second)
	for _, c := range []struct {
		p     *system.Proc
		bound int64
	}{{f.collector, collectorRSSBound}, {f.decider, deciderRSSBound}} {
		rss, err := residentBytes(c.p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s RSS after the flood: %d MiB (bound %d MiB)", c.p.Name, rss>>20, c.bound>>20)
		if rss > c.bound {
			t.Errorf("%s RSS %d MiB after a million pushed targets, want at most %d MiB", c.p.Name, rss>>20, c.bound>>20)
		}
	}
}

// residentBytes reads a service's process_resident_memory_bytes from its
// metrics endpoint.
func residentBytes(p *system.Proc) (int64, error) {
	v, err := p.Metric("process_resident_memory_bytes")
	return int64(v), err
}

// TestHostileAnnotation is the annotation attack: partitionLimitation
// values that once made the decider allocate about 1 GB (499 bytes) or die
// out of memory (4,999 bytes), sent as a collector would relay a tenant's
// PodAutoscaler. The decider refuses them, keeps serving, and its memory
// stays flat.
func TestHostileAnnotation(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := residentBytes(f.decider)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{
		"499 bytes of ranges":   strings.TrimSuffix(strings.Repeat("0-2147483646,", 38), ","),
		"4 KiB of ranges":       strings.TrimSuffix(strings.Repeat("0-2147483646,", 315), ","),
		"4,999 bytes of ranges": strings.TrimSuffix(strings.Repeat("0-2147483646,", 384), ","),
	}
	dc := deciderv1.NewDeciderServiceClient(f.dial(t, "collector", f.decider))
	for name, v := range values {
		st, err := dc.Ingest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ref := &commonv1.TargetRef{Namespace: "tenant", Name: "fn"}
		err = st.Send(&deciderv1.IngestRequest{CollectorId: "attacker", Specs: []*deciderv1.TargetSpec{{
			Target: ref, Strategy: commonv1.Strategy_STRATEGY_LAG,
			Annotations: map[string]string{"lag.tidal.dev/partitionLimitation": v},
		}}})
		if err == nil {
			_, err = st.CloseAndRecv()
		}
		t.Logf("%s (%d bytes): %v", name, len(v), err)
		if len(v) > 4096 && status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT for the value's size", name, err)
		}
		if err != nil && len(err.Error()) > 1024 {
			t.Errorf("%s: a %d-byte error; want a bounded prefix of the value", name, len(err.Error()))
		}
		// Whatever the stream's fate, the decider answers and explains.
		if _, err := dc.GetDecision(ctx, &deciderv1.GetDecisionRequest{Target: ref}); err != nil && status.Code(err) != codes.NotFound {
			t.Errorf("%s: GetDecision after it: %v", name, err)
		}
	}
	after, err := residentBytes(f.decider)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decider RSS: %d MiB before, %d MiB after the hostile annotations", before>>20, after>>20)
	if after-before > 64<<20 {
		t.Errorf("decider RSS grew %d MiB on hostile annotations; want under 64 MiB", (after-before)>>20)
	}
}
