// Package pbconv converts the wire's samples into the engine's, for the
// decider service and for anything that replays a collector's samples
// through decider/engine offline (test/scale's latency split).
package pbconv

import (
	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/strategy/lag"
)

// Sample converts a validated sample.
func Sample(m *commonv1.MetricSample) engine.Sample {
	s := engine.Sample{
		At:        m.GetTime().AsTime(),
		Activator: m.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PUSH,
		ReadyOnly: m.GetSource() == commonv1.SampleSource_SAMPLE_SOURCE_PODS,
		Stat: kpa.Stat{
			AverageConcurrentRequests:        m.GetAverageConcurrency(),
			AverageProxiedConcurrentRequests: m.GetAverageProxiedConcurrency(),
			RequestCount:                     m.GetRequestCount(),
			ProxiedRequestCount:              m.GetProxiedRequestCount(),
		},
		ReadyPods:      -1,
		PartitionCount: m.GetPartitionCount(),
	}
	if m.ReadyPods != nil {
		s.ReadyPods = m.GetReadyPods()
	}
	for _, p := range m.GetPartitionLags() {
		s.Partitions = append(s.Partitions, lag.Partition{
			Topic: p.GetTopic(), ID: p.GetPartition(), End: p.GetEndOffset(), Committed: p.GetCommittedOffset(), HasCommitted: p.CommittedOffset != nil,
		})
	}
	return s
}
