package collectorv1

import (
	"strings"
	"testing"
)

func TestEnsureKEDATargetRequestValidate(t *testing.T) {
	md := map[string]string{"bootstrapServers": "kafka:9092", "consumerGroup": "billing"}
	many := map[string]string{}
	for i := range MaxKEDAMetadata + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name string
		req  *EnsureKEDATargetRequest
		want string // a part of the error; empty: valid
	}{
		{"valid", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: md, Call: KEDACall_KEDA_CALL_GET_METRICS}, ""},
		{"no metadata is the receiver's to refuse", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", Call: KEDACall_KEDA_CALL_ENSURE}, ""},
		{"no namespace", &EnsureKEDATargetRequest{Name: "billing", ScalerMetadata: md, Call: KEDACall_KEDA_CALL_ENSURE}, "namespace"},
		{"a bad name", &EnsureKEDATargetRequest{Namespace: "shop", Name: "Billing_1", ScalerMetadata: md, Call: KEDACall_KEDA_CALL_ENSURE}, "name"},
		{"no call", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: md}, "call"},
		{"an unknown call", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: md, Call: 9}, "call"},
		{"too many keys", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: many, Call: KEDACall_KEDA_CALL_ENSURE}, "scaler_metadata"},
		{"a long key", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: map[string]string{strings.Repeat("k", 400): "v"}, Call: KEDACall_KEDA_CALL_ENSURE}, "at most 317 bytes"},
		{"a long value", &EnsureKEDATargetRequest{Namespace: "shop", Name: "billing", ScalerMetadata: map[string]string{"topic": strings.Repeat("v", 5000)}, Call: KEDACall_KEDA_CALL_ENSURE}, `scaler_metadata["topic"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
			case err != nil && len(err.Error()) > 300:
				t.Errorf("error of %d bytes: want a bounded quote", len(err.Error()))
			}
		})
	}
}
