package targets

import (
	"slices"
	"testing"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// TestClaimDisplacesAtOnce: a source that outranks the one measuring its
// target takes the target over in its own claim, without waiting for the
// other source's next sync, and leaves every other target alone.
func TestClaimDisplacesAtOnce(t *testing.T) {
	d, _ := newUnstartedDiscovery(t)
	web := &commonv1.TargetRef{Namespace: "ns", Name: "web", Kind: "Deployment", ApiVersion: "apps/v1"}
	other := &commonv1.TargetRef{Namespace: "ns", Name: "other", Kind: "Deployment", ApiVersion: "apps/v1"}
	activeKeys := func() []string {
		d.mu.Lock()
		defer d.mu.Unlock()
		var keys []string
		for k := range d.active {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys
	}

	steps := []struct {
		name  string
		key   string
		ref   *commonv1.TargetRef
		rank  rank
		wins  bool
		after []string
	}{
		{"a Function measures its target", "f/ns/fn", web, rankFunction, true, []string{"f/ns/fn"}},
		{"another target's PodAutoscaler", "m/ns/other", other, rankPodAutoscaler, true, []string{"f/ns/fn", "m/ns/other"}},
		{"a user's PodAutoscaler displaces the Function", "m/ns/web", web, rankPodAutoscaler, true, []string{"m/ns/other", "m/ns/web"}},
		{"the Function's next sync stays down", "f/ns/fn", web, rankFunction, false, []string{"m/ns/other", "m/ns/web"}},
		{"the PodAutoscaler's next sync keeps it", "m/ns/web", web, rankPodAutoscaler, true, []string{"m/ns/other", "m/ns/web"}},
	}
	for _, s := range steps {
		if got := d.claim(s.key, s.ref, s.rank); got != s.wins {
			t.Fatalf("%s: claim(%s) = %t, want %t", s.name, s.key, got, s.wins)
		}
		if got := activeKeys(); !slices.Equal(got, s.after) {
			t.Fatalf("%s: active sources %v, want %v", s.name, got, s.after)
		}
	}
}
