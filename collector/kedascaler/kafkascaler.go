package kedascaler

import (
	"fmt"
	"time"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	lagstrategy "github.com/tidalscale/tidal/strategy/lag"
	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// kafkaScaler is KafkaScaler over strategy/lag's keda mode, the code
// test/conformance replays KEDA's vectors through: each Poll is one Decide,
// whose state carries excludePersistentLag's offsets to the next.
type kafkaScaler struct {
	s  *lagstrategy.Scaler
	in lagstrategy.Input
}

// NewKafkaScaler is the KafkaScalerFactory the collector runs: KEDA's
// arithmetic from tidal's own lag strategy, so the answers are the ones
// tidal's keda mode gives.
func NewKafkaScaler(cfg lagconfig.Config) (KafkaScaler, error) {
	// Only KEDA's metric and activity are read, not the HPA model around
	// them: its recommendation window (the stabilization window over the
	// tick interval, up to 4096 slots) would be memory for nothing.
	cfg.ScaleDownStabilization = 0
	s, err := lagstrategy.New(cfg)
	if err != nil {
		return nil, err
	}
	return &kafkaScaler{s: s}, nil
}

func (k *kafkaScaler) Poll(s *commonv1.MetricSample, at time.Time) (float64, bool, error) {
	k.in.Partitions = k.in.Partitions[:0]
	for _, p := range s.GetPartitionLags() {
		k.in.Partitions = append(k.in.Partitions, lagstrategy.Partition{
			Topic: p.GetTopic(), ID: p.GetPartition(), End: p.GetEndOffset(), Committed: p.GetCommittedOffset(), HasCommitted: p.CommittedOffset != nil,
		})
	}
	k.in.PartitionCount = s.GetPartitionCount()
	d := k.s.Decide(&k.in, at)
	if d.Status != lagstrategy.StatusOK {
		return 0, false, fmt.Errorf("KEDA's arithmetic: %w", d.Err)
	}
	return d.KEDA.Metric, d.KEDA.Active, nil
}
