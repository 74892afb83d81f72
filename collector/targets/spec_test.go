package targets

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/collector/scrape"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		metric  autoscalingv1alpha1.ScalingMetric
		want    scrape.Format
		wantErr string
	}{
		{name: "default is the queue-proxy Stat", want: scrape.Format{}},
		{name: "explicit queue-proxy", ann: map[string]string{AnnotationFormat: "queue-proxy"}, want: scrape.Format{}},
		{name: "gauge", ann: map[string]string{AnnotationFormat: "prometheus", AnnotationMetricName: "inflight"},
			want: scrape.Format{Kind: scrape.FormatText, Metric: "inflight"}},
		{name: "counter as rps", ann: map[string]string{AnnotationFormat: "prometheus", AnnotationMetricName: "http_requests_total", AnnotationMetricType: "counter"},
			metric: autoscalingv1alpha1.MetricRPS, want: scrape.Format{Kind: scrape.FormatText, Metric: "http_requests_total", Counter: true, RPS: true}},
		{name: "rps from the Knative annotation", ann: map[string]string{AnnotationFormat: "prometheus", AnnotationMetricName: "r", "autoscaling.knative.dev/metric": "rps"},
			want: scrape.Format{Kind: scrape.FormatText, Metric: "r", RPS: true}},
		{name: "unknown format", ann: map[string]string{AnnotationFormat: "json"}, wantErr: `collector.tidal.dev/format "json"`},
		{name: "missing name", ann: map[string]string{AnnotationFormat: "prometheus"}, wantErr: AnnotationMetricName},
		{name: "unknown type", ann: map[string]string{AnnotationFormat: "prometheus", AnnotationMetricName: "x", AnnotationMetricType: "histogram"}, wantErr: `"histogram"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &autoscalingv1alpha1.Metric{ObjectMeta: metav1.ObjectMeta{Annotations: tt.ann}}
			got, err := format(m, tt.metric)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("format = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("format = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestRetention(t *testing.T) {
	m := &autoscalingv1alpha1.Metric{Spec: autoscalingv1alpha1.MetricSpec{StableWindow: metav1.Duration{Duration: 90 * time.Second}}}
	if got := retention(m); got != 90*time.Second {
		t.Errorf("retention = %s, want the stable window", got)
	}
	// The delay comes resolved in the Metric (the annotation, or
	// config-autoscaler's scale-down-delay, which the collector does not
	// read); the annotation itself is not parsed a second time here.
	m.Spec.ScaleDownDelay = &metav1.Duration{Duration: 2 * time.Minute}
	m.Annotations = map[string]string{kpaconfig.AnnotationScaleDownDelay: "soon"}
	if got := retention(m); got != 210*time.Second {
		t.Errorf("retention = %s, want stable window + the resolved scale-down delay", got)
	}
}

func TestLagSpec(t *testing.T) {
	ref := &commonv1.TargetRef{Namespace: "ns", Name: "fn"}
	maxR := int32(4)
	src := &autoscalingv1alpha1.LagSource{Topic: "in", ConsumerGroup: "g", Mode: autoscalingv1alpha1.LagModeKEDA,
		KEDA: &autoscalingv1alpha1.KEDALagParameters{LagThreshold: 50, OffsetResetPolicy: autoscalingv1alpha1.OffsetResetEarliest, AllowIdleConsumers: true, PartitionLimitation: []int32{0, 2}},
		Riff: &autoscalingv1alpha1.RiffLagParameters{MaxReplicas: &maxR}}
	spec, interval, err := lagSpec(ref, lagMode(string(src.Mode)), lagParams(src), map[string]string{"lag.tidal.dev/pollingInterval": "15", "other": "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lag.tidal.dev/mode": "keda", "lag.tidal.dev/topic": "in", "lag.tidal.dev/lagThreshold": "50",
		"lag.tidal.dev/offsetResetPolicy": "earliest", "lag.tidal.dev/allowIdleConsumers": "true",
		"lag.tidal.dev/partitionLimitation": "0,2", "lag.tidal.dev/maxReplicas": "4", "lag.tidal.dev/pollingInterval": "15",
	}
	for k, v := range want {
		if spec.GetAnnotations()[k] != v {
			t.Errorf("annotation %s = %q, want %q (all: %v)", k, spec.GetAnnotations()[k], v, spec.GetAnnotations())
		}
	}
	if _, ok := spec.GetAnnotations()["other"]; ok || spec.GetStrategy() != commonv1.Strategy_STRATEGY_LAG {
		t.Errorf("spec = %v", spec)
	}
	if interval != 15*time.Second {
		t.Errorf("interval = %s, want KEDA's pollingInterval 15s", interval)
	}
	// riff reads every 100 ms.
	_, interval, err = lagSpec(ref, lagMode("riff"), map[string]string{"topic": "in"}, nil)
	if err != nil || interval != 100*time.Millisecond {
		t.Errorf("riff interval = %s, %v; want 100ms", interval, err)
	}
	// A parameter the decider refuses is an error, not a silent default.
	if _, _, err := lagSpec(ref, "keda", map[string]string{"lagThreshold": "0"}, nil); err == nil {
		t.Error("lagThreshold 0 accepted")
	}
}

func TestKPASpecCarriesTheKeepAlive(t *testing.T) {
	pa := func(ann map[string]string, dec *autoscalingv1alpha1.PodAutoscalerDecision) *autoscalingv1alpha1.PodAutoscaler {
		return &autoscalingv1alpha1.PodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fn", Annotations: ann},
			Spec:       autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "fn"}},
			Status:     autoscalingv1alpha1.PodAutoscalerStatus{LastDecision: dec},
		}
	}
	predictive := map[string]string{kpaconfig.AnnotationKeepAlive: "predictive", "autoscaling.tidal.dev/paused": "false"}
	for _, tc := range []struct {
		name      string
		pa        *autoscalingv1alpha1.PodAutoscaler
		ann       map[string]string
		state     string
		wantState string
	}{
		{name: "no policy", pa: pa(nil, nil), ann: map[string]string{}},
		{name: "the annotation, no decision yet", pa: pa(predictive, nil), ann: map[string]string{kpaconfig.AnnotationKeepAlive: "predictive"}},
		{name: "the memory recorded with the last decision", pa: pa(predictive, &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: 1, KeepAliveState: "CAEYAQ"}),
			ann: map[string]string{kpaconfig.AnnotationKeepAlive: "predictive"}, wantState: "CAEYAQ"},
		{name: "a memory the decider would refuse is left out", pa: pa(predictive, &autoscalingv1alpha1.PodAutoscalerDecision{Sequence: 1, KeepAliveState: "CA E="}),
			ann: map[string]string{kpaconfig.AnnotationKeepAlive: "predictive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := kpaSpec(tc.pa)
			if s.GetKeepAliveState() != tc.wantState {
				t.Errorf("keep_alive_state %q, want %q", s.GetKeepAliveState(), tc.wantState)
			}
			if len(s.GetAnnotations()) != len(tc.ann) || s.GetAnnotations()[kpaconfig.AnnotationKeepAlive] != tc.ann[kpaconfig.AnnotationKeepAlive] {
				t.Errorf("annotations %v, want %v", s.GetAnnotations(), tc.ann)
			}
			if err := s.ValidateField("spec"); err != nil {
				t.Errorf("the spec does not pass the decider's check: %v", err)
			}
		})
	}
}
