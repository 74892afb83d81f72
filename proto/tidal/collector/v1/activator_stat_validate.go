package collectorv1

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Validate implements the validation interceptor's contract. The arrival
// time's distance from the receiver's clock is the handler's to check; this
// checks that it is there and every stat as PushStats checks its stats.
func (r *ForwardActivatorStatsRequest) Validate() error {
	if t := r.GetArrivalTime(); t == nil || !t.IsValid() {
		return invalidArrival(t)
	}
	return validateStats(r.GetStats())
}

func invalidArrival(t *timestamppb.Timestamp) error {
	if t == nil {
		return commonv1.Invalid("arrival_time", "<missing>", "the second the stats arrived")
	}
	return commonv1.Invalid("arrival_time", t.String(), "a valid timestamp")
}
