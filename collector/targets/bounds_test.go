package targets

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// TestSpecsStayWithinTheDecidersBounds: a PodAutoscaler or Function can
// carry far more annotations than a decider accepts; the collector copies
// at most one more than the bound, and its check (the decider's own)
// refuses the spec, so it never reaches an Ingest stream.
func TestSpecsStayWithinTheDecidersBounds(t *testing.T) {
	many := func(prefix string, n, valueLen int) map[string]string {
		m := map[string]string{"unrelated.example.com/x": "y"}
		for i := range n {
			m[fmt.Sprintf("%sk%05d", prefix, i)] = strings.Repeat("v", valueLen)
		}
		return m
	}
	pa := func(ann map[string]string, ref autoscalingv1alpha1.ScaleTargetRef) *autoscalingv1alpha1.PodAutoscaler {
		return &autoscalingv1alpha1.PodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: ann},
			Spec: autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: ref}}
	}
	dep := autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	lagRef := &commonv1.TargetRef{Namespace: "ns", Name: "fn"}
	lagOf := func(extra map[string]string) *deciderv1.TargetSpec {
		s, _, _ := lagSpec(lagRef, "keda", map[string]string{"topic": "in"}, extra)
		return s
	}
	tests := []struct {
		name  string
		spec  *deciderv1.TargetSpec
		field string // "" when the spec passes
	}{
		{"a few Knative annotations", kpaSpec(pa(map[string]string{"autoscaling.knative.dev/target": "10"}, dep)), ""},
		{"20,000 Knative annotations", kpaSpec(pa(many("autoscaling.knative.dev/", 20000, 100), dep)), "spec.annotations"},
		{"20,000 other annotations", kpaSpec(pa(many("example.com/", 20000, 100), dep)), ""},
		{"a Knative annotation of 5 KiB", kpaSpec(pa(many("autoscaling.knative.dev/", 1, 5<<10), dep)), "spec.annotations"},
		{"20,000 lag annotations", lagOf(many("lag.tidal.dev/", 20000, 10)), "spec.annotations"},
		{"a scale target named with a line break", kpaSpec(pa(nil, autoscalingv1alpha1.ScaleTargetRef{APIVersion: "v1", Kind: "Pod\n", Name: "web"})), "spec.target.kind"},
		{"a scale target named with upper case", kpaSpec(pa(nil, autoscalingv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "Web"})), "spec.target.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := len(tt.spec.GetAnnotations()); n > deciderv1.MaxAnnotations+2 {
				t.Errorf("the spec holds %d annotations, want at most %d copied", n, deciderv1.MaxAnnotations+2)
			}
			err := tt.spec.ValidateField("spec")
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), "invalid "+tt.field)):
				t.Errorf("ValidateField = %v, want an error naming %s", err, tt.field)
			case err != nil && len(err.Error()) > 300:
				t.Errorf("an error of %d bytes, want a bounded prefix of the value", len(err.Error()))
			}
		})
	}
}

// TestConfigErrorIsBounded: a configuration error quotes annotation values
// and is sent as measure_error, which the decider refuses above its cap.
func TestConfigErrorIsBounded(t *testing.T) {
	msg := configError(errors.New("annotation x " + strings.Repeat("v", 256<<10) + "\n\x1b[2J"))
	if len(msg) > deciderv1.MaxMeasureError+len("…") || !strings.HasPrefix(msg, "config: annotation x vvv") || !commonv1.IsText(msg) {
		t.Errorf("configError = %d bytes (%.40q…), want at most %d printable bytes", len(msg), msg, deciderv1.MaxMeasureError)
	}
}
