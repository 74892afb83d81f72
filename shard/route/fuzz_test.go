package route

import (
	"slices"
	"strings"
	"testing"
)

// FuzzOwner checks rendezvous hashing's contract on any key and member
// set (members one per line): the owner is a member, found exactly when
// there are members, the same for any order of them; removing a member
// other than the owner keeps the owner, and adding one either keeps the
// owner or makes the newcomer owner. Bucket stays in [0, n).
func FuzzOwner(f *testing.F) {
	f.Add("ns/web", "10.0.0.1:9002\n10.0.0.2:9002\n10.0.0.3:9002", "10.0.0.4:9002", 3)
	f.Add("", "", "", 1)
	f.Add("ns/StatefulSet.apps/web", "a\na\nb", "a", 1000)
	f.Add("k\xff", "\xff\n\x00\n", "\n", -7)
	f.Add(strings.Repeat("k", 5000), strings.Repeat("m\n", 500), strings.Repeat("x", 5000), 1<<30)
	f.Fuzz(func(t *testing.T, key, memberList, newcomer string, n int) {
		var members []string
		if memberList != "" {
			members = strings.Split(memberList, "\n")
		}
		owner, ok := Owner(key, members)
		if ok != (len(members) > 0) || ok && !slices.Contains(members, owner) {
			t.Fatalf("Owner(%q, %q) = %q, %v", key, members, owner, ok)
		}
		if !ok {
			return
		}
		reversed := slices.Clone(members)
		slices.Reverse(reversed)
		if o, _ := Owner(key, reversed); o != owner {
			t.Fatalf("Owner depends on the members' order: %q and %q", owner, o)
		}
		rest := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m != owner && m == members[0] })
		if o, _ := Owner(key, rest); o != owner {
			t.Fatalf("removing %q (not the owner) moved %q from %q to %q", members[0], key, owner, o)
		}
		if o, _ := Owner(key, append(slices.Clone(members), newcomer)); o != owner && o != newcomer {
			t.Fatalf("adding %q moved %q from %q to %q", newcomer, key, owner, o)
		}
		if n > 0 {
			if b := Bucket(key, n); b < 0 || b >= n {
				t.Fatalf("Bucket(%q, %d) = %d", key, n, b)
			}
		}
	})
}
