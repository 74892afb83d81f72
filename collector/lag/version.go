package lag

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kversion"
)

// KEDA's kafka trigger reads version with sarama's grammar: a release
// since 1.0 as MAJOR.MINOR.PATCH ("2.8.0"), one before it with four parts
// ("0.11.0.2"), nothing else (no "v", no "2.8").
var (
	versionSince1  = regexp.MustCompile(`^[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}$`)
	versionBefore1 = regexp.MustCompile(`^0\.[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}$`)
)

// release is a Kafka release as three numbers: MAJOR, MINOR, PATCH since
// 1.0; 0, MINOR, PATCH before (the fourth part names no protocol change).
type release [3]int

func (r release) less(o release) bool { return slices.Compare(r[:], o[:]) < 0 }

func parseRelease(s string) (release, bool) {
	parts := strings.Split(s, ".")
	// As sarama: a leading 0 is a release before 1.0, which has four parts.
	switch {
	case strings.HasPrefix(s, "0"):
		if !versionBefore1.MatchString(s) {
			return release{}, false
		}
		parts = parts[:3]
	case !versionSince1.MatchString(s):
		return release{}, false
	}
	return releaseOf(parts)
}

// releaseOf reads two or three numbers as a release.
func releaseOf(parts []string) (release, bool) {
	var r release
	if len(parts) < 2 || len(parts) > 3 {
		return r, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return r, false
		}
		r[i] = n
	}
	return r, true
}

// versionWant is what the version key wants, as errors say it.
const versionWant = "a Kafka release as KEDA reads it: MAJOR.MINOR.PATCH such as 2.8.0, or 0.MINOR.PATCH.N before 1.0 such as 0.11.0.2"

// MaxVersions reads KEDA's version key: the newest release franz-go knows
// that is not newer than v. KEDA's client (sarama) speaks that release's
// protocol; franz-go negotiates each request's version with the brokers,
// and this caps it there, so tidal asks no more of old brokers than KEDA
// does. A release newer than franz-go knows caps at its newest, which is
// what it negotiates anyway; one older than it knows (0.8.0) is refused.
func MaxVersions(v string) (*kversion.Versions, error) {
	want, ok := parseRelease(v)
	if !ok {
		return nil, &AuthError{"version", versionWant}
	}
	var (
		best    release
		bestStr string
	)
	for _, name := range kversion.VersionStrings() {
		r, ok := knownRelease(name)
		if !ok || want.less(r) || (bestStr != "" && r.less(best)) {
			continue
		}
		best, bestStr = r, name
	}
	if bestStr == "" {
		return nil, &AuthError{"version", fmt.Sprintf("a Kafka release from 0.8.0 on (franz-go speaks none older); %s", versionWant)}
	}
	vs := kversion.FromString(bestStr)
	if vs == nil {
		// VersionStrings names only what FromString takes.
		return nil, fmt.Errorf("franz-go's release %s: not known to kversion.FromString", bestStr)
	}
	return vs, nil
}

// knownRelease reads one of kversion.VersionStrings: v4.4, v0.10.2.
func knownRelease(name string) (release, bool) {
	return releaseOf(strings.Split(strings.TrimPrefix(name, "v"), "."))
}
