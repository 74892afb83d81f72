package knative

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	asmetrics "knative.dev/serving/pkg/autoscaler/metrics"

	"github.com/tidalscale/tidal/collector/activator"
)

// TestDecodeKnativeBytes decodes what Knative's own code writes: the
// activator's messages through asmetrics.ToWireStatMessages and Marshal,
// exactly as pkg/activator's ReportStats sends them.
func TestDecodeKnativeBytes(t *testing.T) {
	sms := []asmetrics.StatMessage{
		{Key: types.NamespacedName{Namespace: "shop", Name: "cart-00001"}, Stat: asmetrics.Stat{PodName: "activator-abc", AverageConcurrentRequests: 1.5, RequestCount: 3}},
		{Key: types.NamespacedName{Namespace: "shop", Name: "pay-00002"}, Stat: asmetrics.Stat{PodName: "activator-abc", AverageConcurrentRequests: 1, RequestCount: 1}},
	}
	wsms := asmetrics.ToWireStatMessages(sms)
	b, err := wsms.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Knative's frame: %x", b)
	f, err := activator.Decode(b, 10)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if f.Invalid != 0 || f.NoStat != 0 || len(f.Stats) != len(sms) {
		t.Fatalf("Decode = %+v, want %d stats", f, len(sms))
	}
	for i, sm := range sms {
		got, want := f.Stats[i], activator.Stat{Namespace: sm.Key.Namespace, Name: sm.Key.Name, PodName: sm.Stat.PodName,
			AverageConcurrency: sm.Stat.AverageConcurrentRequests, RequestCount: sm.Stat.RequestCount}
		if got != want {
			t.Errorf("stat %d = %+v, want %+v", i, got, want)
		}
	}
}
