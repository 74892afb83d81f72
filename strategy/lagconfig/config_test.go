package lagconfig

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var allModes = []Mode{ModeRiffOffset, ModeRiffQueue, ModeKEDA}

func TestDefaultsAreValid(t *testing.T) {
	for _, mode := range allModes {
		c := DefaultConfig(mode)
		if err := c.Validate(); err != nil {
			t.Errorf("DefaultConfig(%s).Validate() = %v", mode, err)
		}
	}
	riff, keda := DefaultConfig(ModeRiffQueue), DefaultConfig(ModeKEDA)
	if riff.TickInterval != 100*time.Millisecond || riff.IdleTimeout != 10*time.Second || riff.MaxReplicas != NoMaxReplicas {
		t.Errorf("riff defaults = %+v, want 100ms tick, 10s idle, unset maxReplicas", riff)
	}
	if keda.TickInterval != 30*time.Second || keda.IdleTimeout != 300*time.Second || keda.MaxReplicas != 100 ||
		keda.LagThreshold != 10 || keda.ActivationLagThreshold != 0 || keda.OffsetResetPolicy != ResetLatest {
		t.Errorf("keda defaults = %+v", keda)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("riff-queue", map[string]string{
		"idleTimeoutMs": "2000", "maxReplicas": "4", "partitions": "8", "tickInterval": "97ms", "faithful": "true", "topic": "in",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.IdleTimeout != 2*time.Second || c.MaxReplicas != 4 || c.DeclaredPartitions != 8 || c.TickInterval != 97*time.Millisecond || !c.Faithful || c.Topic != "in" {
		t.Errorf("ParseConfig = %+v", c)
	}
	k, err := ParseConfig("keda", map[string]string{
		"lagThreshold": "50", "activationLagThreshold": "5", "offsetResetPolicy": "earliest",
		"allowIdleConsumers": "true", "scaleToZeroOnInvalidOffset": "true", "excludePersistentLag": "true",
		"partitionLimitation": "1, 3-5", "pollingInterval": "15", "cooldownPeriod": "60",
		"minReplicaCount": "1", "maxReplicaCount": "7",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{1, 3, 4, 5}
	if len(k.PartitionLimitation) != len(want) {
		t.Fatalf("PartitionLimitation = %v, want %v", k.PartitionLimitation, want)
	}
	for i := range want {
		if k.PartitionLimitation[i] != want[i] {
			t.Errorf("PartitionLimitation = %v, want %v", k.PartitionLimitation, want)
		}
	}
	if k.LagThreshold != 50 || k.ActivationLagThreshold != 5 || k.OffsetResetPolicy != ResetEarliest || !k.AllowIdleConsumers ||
		!k.ScaleToZeroOnInvalidOffset || !k.ExcludePersistentLag || k.TickInterval != 15*time.Second ||
		k.IdleTimeout != time.Minute || k.MinReplicas != 1 || k.MaxReplicas != 7 {
		t.Errorf("ParseConfig = %+v", k)
	}
}

// TestPartitionLimitationIsBounded: a short value cannot expand to millions
// of ids (a 499-byte annotation used to make the decider allocate about
// 1 GB), repeats count once, and the error quotes a bounded prefix.
func TestPartitionLimitationIsBounded(t *testing.T) {
	huge := strings.TrimSuffix(strings.Repeat("0-1048575,", 50), ",")
	if _, err := ParsePartitionLimitation(huge); err == nil || !strings.Contains(err.Error(), "at most 10000 distinct partitions") {
		t.Errorf("ParsePartitionLimitation(%d bytes of whole ranges) = %v, want refused for its size", len(huge), err)
	} else if len(err.Error()) > 300 {
		t.Errorf("error is %d bytes: want a bounded prefix of the value", len(err.Error()))
	}
	got, err := ParsePartitionLimitation("5,0-3,2-4,3,9999")
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{0, 1, 2, 3, 4, 5, 9999}
	if !slices.Equal(got, want) {
		t.Errorf("ParsePartitionLimitation = %v, want %v (sorted, each id once)", got, want)
	}
	if _, err := ParsePartitionLimitation(strings.Repeat("1,", 3000)); err == nil {
		t.Error("a 6,000-byte value: want refused")
	}
	if got, err := ParsePartitionLimitation("0-9999"); err != nil || len(got) != 10000 {
		t.Errorf("exactly the bound: %d ids, %v", len(got), err)
	}
}
