package lag

import (
	"testing"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

func TestNextFactor(t *testing.T) {
	tests := []struct {
		total, partitions, threshold int64
		want                         int64
		ok                           bool
	}{
		{0, 12, 10, 1, true},
		{10, 12, 10, 1, true},
		{11, 12, 10, 2, true},
		{25, 12, 10, 3, true},
		{41, 12, 10, 6, true}, // 5 is no factor of 12
		{120, 12, 10, 12, true},
		{121, 12, 10, 0, false},
		{5, 0, 10, 0, false},
		{1 << 62, 7, 1 << 60, 7, true},
	}
	for _, tt := range tests {
		got, ok := nextFactor(tt.total, tt.partitions, tt.threshold)
		if got != tt.want || ok != tt.ok {
			t.Errorf("nextFactor(%d, %d, %d) = %d, %v; want %d, %v", tt.total, tt.partitions, tt.threshold, got, ok, tt.want, tt.ok)
		}
	}
}

// TestEnsureEvenDistributionOfPartitions is the defect a PodAutoscaler with
// the CRD's ensureEvenDistributionOfPartitions hit: the collector emits the
// parameter, and the parser refused it as unknown.
func TestEnsureEvenDistributionOfPartitions(t *testing.T) {
	c, err := lagconfig.ParseConfig(string(lagconfig.ModeKEDA), map[string]string{"ensureEvenDistributionOfPartitions": "true", "lagThreshold": "10"})
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if !c.EnsureEvenDistributionOfPartitions {
		t.Fatal("EnsureEvenDistributionOfPartitions not set")
	}
	_, err = lagconfig.ParseConfig(string(lagconfig.ModeKEDA), map[string]string{"ensureEvenDistributionOfPartitions": "true", "limitToPartitionsWithLag": "true"})
	if err == nil {
		t.Error("ensureEvenDistributionOfPartitions with limitToPartitionsWithLag: want an error, as the CRD refuses it")
	}
}
