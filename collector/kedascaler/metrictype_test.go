package kedascaler

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/proto/externalscaler"
)

// fakeScaledObjects serves one ScaledObject's triggers, or err.
type fakeScaledObjects struct {
	triggers []ScaledObjectTrigger
	err      error
}

func (f fakeScaledObjects) Triggers(context.Context, string, string) ([]ScaledObjectTrigger, error) {
	return f.triggers, f.err
}

// TestMetricTypeChecked: every call for a trigger whose ScaledObject gives
// it a metricType under which the HPA would not land on tidal's answer is
// INVALID_ARGUMENT naming the field and quoting a bounded prefix of the
// value; Value suits keda mode (KEDA's own metric and target); a
// ScaledObject that cannot be read, or whose matching trigger is another's,
// is not checked.
func TestMetricTypeChecked(t *testing.T) {
	inlineKEDA := billing()
	inlineRiff := billing("lag.tidal.dev/mode", "riff-queue")
	delete(inlineRiff, "lagThreshold")
	delete(inlineRiff, "activationLagThreshold")
	long := strings.Repeat("Value", 100)
	tests := []struct {
		name    string
		md      map[string]string
		so      fakeScaledObjects
		wantErr []string // nil: answered
	}{
		{name: "follow, unset", md: followWeb, so: soWith("external", "", followWeb)},
		{name: "follow, AverageValue", md: followWeb, so: soWith("external-push", "AverageValue", followWeb)},
		{name: "follow, Value", md: followWeb, so: soWith("external", "Value", followWeb),
			wantErr: []string{"ScaledObject shop/so spec.triggers[1].metricType", `"Value"`, "AverageValue (or none)"}},
		{name: "follow, Utilization", md: followWeb, so: soWith("external", "Utilization", followWeb),
			wantErr: []string{"spec.triggers[1].metricType", `"Utilization"`, "only for cpu and memory"}},
		{name: "follow, a long unknown value", md: followWeb, so: soWith("external", long, followWeb),
			wantErr: []string{"spec.triggers[1].metricType", `"ValueValue`, "AverageValue (the default) or Value"}},
		{name: "another trigger's Value", md: followWeb, so: soWith("external", "Value", map[string]string{"podAutoscaler": "other"})},
		{name: "a kafka trigger's Value", md: followWeb, so: fakeScaledObjects{triggers: []ScaledObjectTrigger{{Type: "kafka", MetricType: "Value", Metadata: followWeb}}}},
		{name: "no ScaledObject to read", md: followWeb, so: fakeScaledObjects{err: errors.New("not found")}},
		{name: "inline keda mode, Value", md: inlineKEDA, so: soWith("external", "Value", inlineKEDA)},
		{name: "inline riff mode, Value", md: inlineRiff, so: soWith("external", "Value", inlineRiff),
			wantErr: []string{"spec.triggers[1].metricType", `"Value"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newInlineFixture(t, testConfig(), nil, nil)
			s := New(testConfig(), fakeTargets{webPA: webRef}, f.dec, &Inline{Triggers: f.tr}, callerOf, prometheus.NewRegistry(), f.s.log)
			s.SetScaledObjects(tt.so)
			f.dec.set(webRef, 1, 3)
			f.reader.set([2]int64{30, 0})
			ref := &externalscaler.ScaledObjectRef{Namespace: "shop", Name: "so", ScalerMetadata: tt.md}
			ctx := context.Background()
			calls := map[string]func() error{
				"GetMetricSpec": func() error { _, err := s.GetMetricSpec(ctx, ref); return err },
				"GetMetrics": func() error {
					_, err := s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
					return err
				},
				"IsActive": func() error { _, err := s.IsActive(ctx, ref); return err },
			}
			for name, call := range calls {
				err := call()
				if tt.wantErr == nil {
					// GetMetricSpec reads nothing else that could fail here.
					if status.Code(err) == codes.InvalidArgument || (name == "GetMetricSpec" && err != nil) {
						t.Errorf("%s: %v, want an answer", name, err)
					}
					continue
				}
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%s: %v, want INVALID_ARGUMENT", name, err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not contain %q", name, err, w)
					}
				}
				if len(err.Error()) > 600 {
					t.Errorf("%s: a %d-byte error: want a bounded prefix", name, len(err.Error()))
				}
			}
		})
	}
}

// soWith is a ScaledObject whose second trigger is of type typ with
// metricType mt and metadata md (KEDA's own cpu trigger first).
func soWith(typ, mt string, md map[string]string) fakeScaledObjects {
	return fakeScaledObjects{triggers: []ScaledObjectTrigger{
		{Type: "cpu", MetricType: "Utilization", Metadata: map[string]string{"value": "50"}},
		{Type: typ, MetricType: mt, Metadata: md},
	}}
}
