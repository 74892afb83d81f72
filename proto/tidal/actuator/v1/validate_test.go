package actuatorv1

import (
	"strconv"
	"strings"
	"testing"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestFunctionSpecBounds(t *testing.T) {
	good := func() *FunctionSpec {
		return &FunctionSpec{Image: "registry.example/fn:1", InputTopic: "in", Brokers: "kafka:9092", Env: map[string]string{"MODE": "fast"}}
	}
	many := map[string]string{}
	for i := range MaxEnv + 1 {
		many["V"+strconv.Itoa(i)] = "1"
	}
	big := map[string]string{}
	for i := range 9 {
		big["V"+strconv.Itoa(i)] = strings.Repeat("x", MaxEnvValue)
	}
	tests := []struct {
		name   string
		mutate func(*FunctionSpec)
		field  string
	}{
		{"129 variables", func(s *FunctionSpec) { s.Env = many }, "f.env"},
		{"a name with a newline", func(s *FunctionSpec) { s.Env = map[string]string{"A\nB": "1"} }, "f.env"},
		{"a name starting with a digit", func(s *FunctionSpec) { s.Env = map[string]string{"1A": "1"} }, "f.env"},
		{"a 3 MB value", func(s *FunctionSpec) { s.Env = map[string]string{"A": strings.Repeat("x", 3<<20)} }, "f.env[A]"},
		{"288 KiB in all", func(s *FunctionSpec) { s.Env = big }, "f.env"},
		{"a 3 MB image", func(s *FunctionSpec) { s.Image = strings.Repeat("x", 3<<20) }, "f.image"},
		{"a 3 MB broker list", func(s *FunctionSpec) { s.Brokers = strings.Repeat("k:1,", 1<<18) + "k:1" }, "f.brokers"},
		{"a consumer group with escapes", func(s *FunctionSpec) { s.ConsumerGroup = "g\x1b[2J" }, "f.consumer_group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(s)
			err := s.validateField("f")
			if err == nil || !strings.Contains(err.Error(), "invalid "+tt.field+" ") {
				t.Fatalf("validateField = %v, want an error naming %s", err, tt.field)
			}
			if len(err.Error()) > 64+2*commonv1.MaxQuoted+200 {
				t.Errorf("a %d-byte error: want a bounded prefix of the value", len(err.Error()))
			}
		})
	}
	if err := good().validateField("f"); err != nil {
		t.Errorf("good spec refused: %v", err)
	}
}

func TestScaleRequestKeepAlive(t *testing.T) {
	good := func() *ScaleRequest {
		return &ScaleRequest{Target: &commonv1.TargetRef{Namespace: "ns", Name: "a"}, DecisionSequence: 1,
			KeepAliveState: strings.Repeat("Az09-_", commonv1.MaxKeepAliveState/6), PredictedIdle: true}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a request at the bounds refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*ScaleRequest)
		field  string
	}{
		{"a 3 MB state", func(r *ScaleRequest) { r.KeepAliveState = strings.Repeat("A", 3<<20) }, "keep_alive_state"},
		{"a state with a line break", func(r *ScaleRequest) { r.KeepAliveState = "AB\nC" }, "keep_alive_state"},
		{"predicted idle with pods", func(r *ScaleRequest) { r.DesiredReplicas = 2 }, "predicted_idle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.mutate(r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), "invalid "+tc.field) {
				t.Fatalf("Validate = %.200v, want an error naming %s", err, tc.field)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes, want a bounded prefix", len(err.Error()))
			}
		})
	}
}
