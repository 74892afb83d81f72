package activator

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestByPodAutoscaler(t *testing.T) {
	// The PodAutoscalers a cache holds, by namespace/name.
	cached := map[string]*commonv1.TargetRef{
		"shop/cart-00001": {Namespace: "shop", Name: "cart-web", ApiVersion: "apps/v1", Kind: "Deployment"},
		"shop/pay-00001":  {Namespace: "shop", Name: "pay", ApiVersion: "example.com/v1", Kind: "Widget"},
	}
	broken := errors.New(`knative podautoscaler shop/bad-00001: invalid spec.scaleTargetRef.kind "Deployment!"`)
	lookup := func(ns, name string) (*commonv1.TargetRef, bool, error) {
		if name == "bad-00001" {
			return nil, true, broken
		}
		ref, ok := cached[ns+"/"+name]
		return ref, ok, nil
	}
	long := strings.Repeat("r", 60)
	tests := []struct {
		revision string
		want     string // the target's key; empty means an error
		rule     bool   // named by the naming rule
	}{
		{"cart-00001", "shop/cart-web", false},
		{"pay-00001", "shop/Widget.example.com/pay", false},
		{"new-00001", "shop/new-00001-deployment", true},
		{long, "shop/" + long[:20] + "fc58ac6720764672e18f97efd7ef704e-deployment", true},
		{"bad-00001", "", false},
	}
	m := NewMetrics(prometheus.NewRegistry())
	resolve := ByPodAutoscaler(lookup, m, zap.NewNop())
	var byPA, byRule float64
	for _, tt := range tests {
		t.Run(tt.revision, func(t *testing.T) {
			ref, err := resolve("shop", tt.revision)
			switch {
			case tt.want == "":
				if !errors.Is(err, broken) {
					t.Errorf("resolve = %v, %v; want the lookup's error", ref, err)
				}
				return
			case err != nil:
				t.Fatalf("resolve: %v", err)
			case ref.Key() != tt.want:
				t.Errorf("target %s, want %s", ref.Key(), tt.want)
			}
			if tt.rule {
				byRule++
			} else {
				byPA++
			}
			if got, want := [2]float64{value(m.byPodAutoscaler), value(m.byNamingRule)}, [2]float64{byPA, byRule}; got != want {
				t.Errorf("resolved by podautoscaler, naming-rule = %v, want %v", got, want)
			}
		})
	}
}
