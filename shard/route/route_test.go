package route

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ns-%d/target-%d", i%37, i)
	}
	return out
}

func TestOwnerIsOrderIndependent(t *testing.T) {
	a := []string{"10.0.0.1:9002", "10.0.0.2:9002", "10.0.0.3:9002"}
	b := []string{"10.0.0.3:9002", "10.0.0.1:9002", "10.0.0.2:9002"}
	for _, k := range keys(500) {
		x, _ := Owner(k, a)
		y, _ := Owner(k, b)
		if x != y {
			t.Fatalf("Owner(%q) = %s with one order and %s with another", k, x, y)
		}
	}
	if _, ok := Owner("a/b", nil); ok {
		t.Error("Owner with no members reported an owner")
	}
}

func TestOwnerBalancesAndMovesOnlyWhatItMust(t *testing.T) {
	members := []string{"d-0:9002", "d-1:9002", "d-2:9002", "d-3:9002"}
	ks := keys(20000)
	count := map[string]int{}
	before := map[string]string{}
	for _, k := range ks {
		o, _ := Owner(k, members)
		count[o]++
		before[k] = o
	}
	for _, m := range members {
		// Expect 5000 each; allow 5 standard deviations.
		if d := math.Abs(float64(count[m]) - 5000); d > 5*math.Sqrt(20000*0.25*0.75) {
			t.Errorf("member %s owns %d of 20000 keys, want about 5000", m, count[m])
		}
	}
	// Adding a member moves keys only to it.
	grown := append(slices.Clone(members), "d-4:9002")
	moved := 0
	for _, k := range ks {
		o, _ := Owner(k, grown)
		if o != before[k] {
			moved++
			if o != "d-4:9002" {
				t.Fatalf("key %s moved from %s to %s, not to the new member", k, before[k], o)
			}
		}
	}
	if moved < 3000 || moved > 5000 {
		t.Errorf("%d keys moved to the fifth member, want about 4000", moved)
	}
	// Removing a member moves only its keys.
	shrunk := members[1:]
	for _, k := range ks {
		o, _ := Owner(k, shrunk)
		if before[k] != members[0] && o != before[k] {
			t.Fatalf("key %s moved from %s to %s though its owner stayed", k, before[k], o)
		}
	}
}

func TestBucket(t *testing.T) {
	count := make([]int, 10)
	for _, k := range keys(10000) {
		b := Bucket(k, 10)
		if b < 0 || b >= 10 {
			t.Fatalf("Bucket = %d", b)
		}
		count[b]++
	}
	for b, c := range count {
		if c < 800 || c > 1200 {
			t.Errorf("bucket %d holds %d of 10000 keys, want about 1000", b, c)
		}
	}
	// Every replica computes the same bucket: the hash is fixed, not seeded.
	if got, want := Bucket("default/hello", 10), int(Score("default/hello", "bucket")%10); got != want {
		t.Errorf("Bucket = %d, want %d", got, want)
	}
}

func BenchmarkOwner(b *testing.B) {
	members := []string{"d-0:9002", "d-1:9002", "d-2:9002"}
	for b.Loop() {
		Owner("default/hello-00001", members)
	}
}
