// Package route assigns each target to one decider replica by rendezvous
// (highest random weight) hashing: the owner of a key is a pure function of
// the key and the member set, so every collector replica agrees without
// talking, and adding or removing one member moves only the keys that member
// wins or held.
package route

// Owner returns the member with the highest score for key, and false when
// there are no members. Ties (practically impossible) go to the member that
// sorts first, so the result does not depend on the order of members.
func Owner(key string, members []string) (string, bool) {
	best, bestScore, found := "", uint64(0), false
	for _, m := range members {
		s := Score(key, m)
		if !found || s > bestScore || (s == bestScore && m < best) {
			best, bestScore, found = m, s, true
		}
	}
	return best, found
}

// Score is the weight of member for key: FNV-1a over the member, a
// separator and the key, finished with the SplitMix64 mixer so that similar
// member names give unrelated weights.
func Score(key, member string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	h = (h ^ 0xff) * prime // 0xff never occurs in UTF-8 text
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Bucket maps key to one of n buckets (n > 0) with the same hash, for
// splitting targets among collector replicas.
func Bucket(key string, n int) int {
	return int(Score(key, "bucket") % uint64(n))
}
