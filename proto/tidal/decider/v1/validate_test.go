package deciderv1

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestIngestBounds(t *testing.T) {
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "app"}
	good := func() *IngestRequest {
		return &IngestRequest{
			CollectorId: "c1",
			Specs: []*TargetSpec{{Target: ref, Strategy: commonv1.Strategy_STRATEGY_KPA, KeepAliveState: strings.Repeat("Az09-_", commonv1.MaxKeepAliveState/6),
				Annotations: map[string]string{"autoscaling.knative.dev/max-scale": "10", "lag.tidal.dev/partitionLimitation": strings.Repeat("1,", MaxAnnotationValue/2-1) + "1"}}},
			Metrics:               []*TargetMetrics{{Target: ref, MeasureError: strings.Repeat("e", MaxMeasureErrorHard)}},
			ScrapesCompleteBefore: timestamppb.Now(),
		}
	}
	many := func(n, valueLen int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("autoscaling.knative.dev/k%05d", i)] = strings.Repeat("v", valueLen)
		}
		return m
	}
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name   string
		mutate func(*IngestRequest)
		field  string
	}{
		{"20,000 annotations", func(r *IngestRequest) { r.Specs[0].Annotations = many(20000, 100) }, "specs[0].annotations"},
		{"one annotation too many", func(r *IngestRequest) { r.Specs[0].Annotations = many(MaxAnnotations+1, 1) }, "specs[0].annotations"},
		{"a value of 4097 bytes", func(r *IngestRequest) { r.Specs[0].Annotations = many(1, MaxAnnotationValue+1) }, `specs[0].annotations["autoscaling.knative.dev/k00000"]`},
		{"too many bytes in all", func(r *IngestRequest) { r.Specs[0].Annotations = many(MaxAnnotations, MaxAnnotationValue) }, "specs[0].annotations"},
		{"a huge key", func(r *IngestRequest) { r.Specs[0].Annotations = map[string]string{strings.Repeat("k", 1<<20): ""} }, `specs[0].annotations["kkkk`},
		{"a key with a line break", func(r *IngestRequest) { r.Specs[0].Annotations = map[string]string{"a\nb": ""} }, `specs[0].annotations["a\nb"]`},
		{"container concurrency", func(r *IngestRequest) { r.Specs[0].ContainerConcurrency = math.MaxInt32 }, "specs[0].container_concurrency"},
		{"a keep-alive state of 1025 bytes", func(r *IngestRequest) { r.Specs[0].KeepAliveState = strings.Repeat("A", commonv1.MaxKeepAliveState+1) }, "specs[0].keep_alive_state"},
		{"a keep-alive state with padding", func(r *IngestRequest) { r.Specs[0].KeepAliveState = "CAE=" }, "specs[0].keep_alive_state"},
		{"ready pods 2^31-1", func(r *IngestRequest) { r.Metrics[0].ReadyPods = i32(math.MaxInt32) }, "metrics[0].ready_pods"},
		{"a 3 MB measure error", func(r *IngestRequest) { r.Metrics[0].MeasureError = strings.Repeat("e", 3<<20) }, "metrics[0].measure_error"},
		{"a 3 MB target name", func(r *IngestRequest) {
			r.Removed = []*commonv1.TargetRef{{Namespace: "ns", Name: strings.Repeat("a", 3<<20)}}
		}, "removed[0].name"},
		{"a config-autoscaler of 20,000 keys", func(r *IngestRequest) {
			r.KnativeConfig = &KnativeConfig{Autoscaler: &ConfigMapData{Data: many(20000, 10)}}
		}, "knative_config.autoscaler.data"},
		{"a config-deployment value of 4097 bytes", func(r *IngestRequest) {
			r.KnativeConfig = &KnativeConfig{Deployment: &ConfigMapData{Data: many(1, MaxAnnotationValue+1)}}
		}, `knative_config.deployment.data["autoscaling.knative.dev/k00000"]`},
		{"a Pod as kind with a line break", func(r *IngestRequest) {
			r.Metrics[0].Target = &commonv1.TargetRef{Namespace: "ns", Name: "a", Kind: "Pod\n"}
		}, "metrics[0].target.kind"},
		{"a completion time past year 9999", func(r *IngestRequest) {
			r.ScrapesCompleteBefore = &timestamppb.Timestamp{Seconds: math.MaxInt64}
		}, "scrapes_complete_before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.mutate(r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), "invalid "+tt.field) {
				t.Fatalf("Validate = %.200v, want an error naming %s", err, tt.field)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes, want a bounded prefix of the value: %.200q", len(err.Error()), err.Error())
			}
		})
	}
	if err := good().Validate(); err != nil {
		t.Errorf("a request at every bound refused: %v", err)
	}
}

func TestListDecisionsPageFields(t *testing.T) {
	if err := (&ListDecisionsRequest{PageSize: 5000, PageToken: commonv1.PageToken("ns/a")}).Validate(); err != nil {
		t.Errorf("a large page size and a good token refused: %v", err)
	}
	for _, r := range []*ListDecisionsRequest{{PageSize: -1}, {PageToken: "%%%"}, {Namespace: "Bad"}} {
		if err := r.Validate(); err == nil {
			t.Errorf("Validate(%v) = nil, want an error", r)
		}
	}
}
