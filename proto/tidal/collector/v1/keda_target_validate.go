package collectorv1

import (
	"fmt"
	"maps"
	"slices"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Bounds of EnsureKEDATargetRequest.scaler_metadata: those the collector
// applies to KEDA's own calls, so a forwarded call is never larger than
// one KEDA could make.
const (
	MaxKEDAMetadata      = 64
	MaxKEDAMetadataKey   = 317
	MaxKEDAMetadataValue = 4096
)

// Validate implements the validation interceptor's contract. The receiver
// reads the metadata itself (every key, every value); this checks only
// what bounds the request.
func (r *EnsureKEDATargetRequest) Validate() error {
	if err := commonv1.ValidateLabel("namespace", r.GetNamespace()); err != nil {
		return err
	}
	if err := commonv1.ValidateSubdomain("name", r.GetName()); err != nil {
		return err
	}
	if _, ok := KEDACall_name[int32(r.GetCall())]; !ok || r.GetCall() == KEDACall_KEDA_CALL_UNSPECIFIED {
		return commonv1.Invalid("call", r.GetCall(), "KEDA_CALL_ENSURE, KEDA_CALL_GET_METRICS or KEDA_CALL_IS_ACTIVE")
	}
	md := r.GetScalerMetadata()
	if n := len(md); n > MaxKEDAMetadata {
		return commonv1.Invalid("scaler_metadata", fmt.Sprintf("%d entries", n), fmt.Sprintf("at most %d entries", MaxKEDAMetadata))
	}
	keys := slices.Sorted(maps.Keys(md)) // the same first error every time
	for _, k := range keys {
		f := fmt.Sprintf("scaler_metadata[%q]", commonv1.Prefix(k))
		if len(k) > MaxKEDAMetadataKey {
			return commonv1.Invalid(f, k, fmt.Sprintf("a key of at most %d bytes", MaxKEDAMetadataKey))
		}
		if v := md[k]; len(v) > MaxKEDAMetadataValue {
			return commonv1.Invalid(f, v, fmt.Sprintf("a value of at most %d bytes", MaxKEDAMetadataValue))
		}
	}
	return nil
}
