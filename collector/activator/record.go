package activator

import (
	"context"
	"crypto/md5" //nolint:gosec // Knative's child-name hash, not a security measure.
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Resolver names the tidal target a revision's stats are about.
type Resolver func(namespace, revision string) (*commonv1.TargetRef, error)

// RevisionDeployment is the Resolver by Knative's naming: a Revision's
// Deployment is the revision's name with "-deployment" appended, and a name
// that would pass 63 bytes keeps its first 20 bytes, then the hex MD5 of the
// whole revision name, then the suffix (knative.dev/serving v0.50.0,
// pkg/reconciler/revision/resources/names; knative.dev/pkg kmeta.ChildName).
func RevisionDeployment(namespace, revision string) (*commonv1.TargetRef, error) {
	const suffix, longest, hashLen = "-deployment", 63, 2 * md5.Size
	name := revision + suffix
	if len(name) > longest {
		sum := md5.Sum([]byte(revision)) //nolint:gosec // a name, as Knative hashes it.
		name = revision[:longest-hashLen-len(suffix)] + hex.EncodeToString(sum[:]) + suffix
	}
	if !commonv1.IsLabel(namespace) || !commonv1.IsSubdomain(name) {
		return nil, fmt.Errorf("revision %s/%s: no valid Deployment name", commonv1.Prefix(namespace), commonv1.Prefix(revision))
	}
	return &commonv1.TargetRef{Namespace: namespace, Name: name, ApiVersion: "apps/v1", Kind: "Deployment"}, nil
}

// Counts says what became of the stats handed to a Recorder.
type Counts struct {
	// Recorded stats are in the hub.
	Recorded int
	// Unknown stats name a target this collector does not measure.
	Unknown int
	// TargetLimit stats would have made a target beyond --max-targets.
	TargetLimit int
	// Backlog stats were dropped while a decider's backlog stayed full.
	Backlog int
}

// Recorder records stats for targets this replica owns, at the second
// they arrived. A wait for room in a decider's backlog ends with ctx.
type Recorder interface {
	Record(ctx context.Context, at time.Time, refs []*commonv1.TargetRef, stats []Stat) Counts
}

// HubRecorder records into the collector's hub, the path PushStats takes:
// pushed samples, stamped with their arrival second; a stat with
// concurrency for a target at zero goes to its decider at once.
type HubRecorder struct {
	Hub *dispatch.Hub
	// Implicit makes an unknown target a KPA target with defaults
	// (--discovery=push), up to --max-targets.
	Implicit bool
	// Wait bounds the wait while a decider's backlog is full.
	Wait time.Duration
}

// Record implements Recorder. Each stat stands alone: one for an unknown
// target is counted and the others are recorded.
func (r HubRecorder) Record(ctx context.Context, at time.Time, refs []*commonv1.TargetRef, stats []Stat) Counts {
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	err := r.Hub.WaitRoom(wctx)
	cancel()
	if err != nil {
		return Counts{Backlog: len(stats)}
	}
	var c Counts
	ts := timestamppb.New(at)
	one := make([]*commonv1.TargetRef, 1)
	sample := make([]*commonv1.MetricSample, 1)
	for i := range stats {
		s := &stats[i]
		one[0] = refs[i]
		sample[0] = &commonv1.MetricSample{
			Time:                      ts,
			Source:                    commonv1.SampleSource_SAMPLE_SOURCE_PUSH,
			AverageConcurrency:        s.AverageConcurrency,
			AverageProxiedConcurrency: s.AverageProxiedConcurrency,
			RequestCount:              s.RequestCount,
			ProxiedRequestCount:       s.ProxiedRequestCount,
		}
		switch refused, full := r.Hub.RecordPushed(one, sample, r.Implicit); {
		case full:
			c.TargetLimit++
		case refused >= 0:
			c.Unknown++
		default:
			c.Recorded++
		}
	}
	return c
}
