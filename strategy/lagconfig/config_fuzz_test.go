package lagconfig

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidalscale/tidal/keyval"
)

// maxErrBytes bounds every refusal: an error reaches logs, Events and
// status, and must not carry a tenant's whole annotation.
const maxErrBytes = 1024

// checkErr asserts the shape of every refusal: ErrInvalidConfig, bounded,
// valid UTF-8, without a raw control character, and of the form
// "invalid lag config: <field> <value>: want ...". It returns what follows
// the prefix.
func checkErr(t *testing.T, err error) string {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %q does not wrap ErrInvalidConfig", msg)
	}
	if len(msg) >= maxErrBytes || !utf8.ValidString(msg) {
		t.Fatalf("error is %d bytes (valid UTF-8: %v), want under %d: %.200q", len(msg), utf8.ValidString(msg), maxErrBytes, msg)
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Fatalf("error carries a raw control character: %q", msg)
	}
	rest, ok := strings.CutPrefix(msg, ErrInvalidConfig.Error()+": ")
	var ke *keyval.Error
	if !ok || !errors.As(err, &ke) || !strings.HasPrefix(rest, keyval.Name(ke.Key)+" ") {
		t.Fatalf("error %q does not name a field", msg)
	}
	return rest
}

// names reports whether a refusal (what follows the prefix) names field.
func names(rest, field string) bool { return strings.HasPrefix(rest, keyval.Name(field)+" ") }

// related lists, for a parameter, the fields a refusal may name besides
// the parameter itself: its alias in Validate, and the fields checked
// against it.
var related = map[string][]string{
	"pollingInterval":          {"tickInterval"},
	"idleTimeoutMs":            {"idleTimeout"},
	"cooldownPeriod":           {"idleTimeout"},
	"maxReplicas":              {"maxReplicaCount"},
	"maxReplicaCount":          {"maxReplicas"},
	"minReplicaCount":          {"minReplicas", "maxReplicaCount"},
	"lagForOne":                {"lagForMax"},
	"allowIdleConsumers":       {"limitToPartitionsWithLag"},
	"limitToPartitionsWithLag": {"ensureEvenDistributionOfPartitions"},
}

var seedParams = []struct{ mode, k1, v1, k2, v2 string }{
	{"riff-queue", "idleTimeoutMs", "2000", "maxReplicas", "4"},
	{"riff-offset", "lagForOne", "5", "lagForMax", "5"},
	{"keda", "partitionLimitation", "1, 3-5", "pollingInterval", "15"},
	{"keda", "partitionLimitation", "0-999999999", "lagThreshold", "10"},
	{"keda", "partitionLimitation", "0-1048575,0-1048575", "maxReplicaCount", "-1"},
	{"keda", "lagThreshold", "NaN", "activationLagThreshold", "+Inf"},
	{"keda", "tolerance", "1e300", "offsetResetPolicy", "earliest\x00"},
	{"keda", "tolerance", "-0", "minReplicaCount", "200"},
	{"keda", "allowIdleConsumers", "true", "limitToPartitionsWithLag", "true"},
	{"keda", "ensureEvenDistributionOfPartitions", "1", "limitToPartitionsWithLag", "T"},
	{"riff-queue", "tickInterval", "1ns", "idleTimeout", "-1s"},
	{"riff-queue", "tickInterval", "9223372036854775807ns", "scaleDownStabilization", "2562048h"},
	{"riff-queue", "minReplicaCount", "1", "partitions", "-3"},
	{"riff-queue", "topic", "in\n\x1b[2J", "faithful", "yes"},
	{"keda", "cooldownPeriod", "2147483648", "idleTimeoutMs", "99999999999"},
	{"bogus\x1b[31m", "idleTimeoutMsx", "5", "", ""},
	{"riff-queue", strings.Repeat("k", 5000), strings.Repeat("\xff", 5000), "mode", "keda"},
	{strings.Repeat("m", 5000), "topic", "t", "lagForMax", "0x10"},
}

// FuzzParseConfig: any parameters give either a config that passes
// Validate, with a bounded partition list and a tick no shorter than
// MinTickInterval, or one bounded error naming the parameter at fault; and
// the same parameters as lag.tidal.dev/* annotations give the same answer.
func FuzzParseConfig(f *testing.F) {
	for _, s := range seedParams {
		f.Add(s.mode, s.k1, s.v1, s.k2, s.v2)
	}
	f.Fuzz(func(t *testing.T, mode, k1, v1, k2, v2 string) {
		params := map[string]string{k1: v1, k2: v2}
		c, err := ParseConfig(mode, params)
		if err != nil {
			rest := checkErr(t, err)
			ok := names(rest, "mode")
			for _, k := range []string{k1, k2} {
				ok = ok || names(rest, k) || slices.ContainsFunc(related[k], func(f string) bool { return names(rest, f) })
			}
			if !ok {
				t.Fatalf("ParseConfig(%q, %q) = %q: names neither a given parameter nor one checked against it", mode, params, err)
			}
		} else {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("ParseConfig(%q, %q) accepted a config that fails Validate: %v", mode, params, verr)
			}
			if c.TickInterval < MinTickInterval {
				t.Fatalf("tickInterval %s under %s", c.TickInterval, MinTickInterval)
			}
			if len(c.PartitionLimitation) > MaxListedPartitions {
				t.Fatalf("%d partitions listed, want at most %d", len(c.PartitionLimitation), MaxListedPartitions)
			}
		}
		if k1 == "mode" || k2 == "mode" {
			return // a parameter, but mode's annotation
		}
		ann := map[string]string{
			AnnotationPrefix + "mode": mode, AnnotationPrefix + k1: v1, AnnotationPrefix + k2: v2,
			"autoscaling.knative.dev/target": "NaN", // not ours: ignored
		}
		ac, aerr := FromAnnotations(ann)
		if (err == nil) != (aerr == nil) || err != nil && err.Error() != aerr.Error() || err == nil && !reflect.DeepEqual(c, ac) {
			t.Fatalf("ParseConfig = %+v, %v; FromAnnotations = %+v, %v", c, err, ac, aerr)
		}
	})
}

// FuzzParsePartitionLimitation: an accepted list is a sorted set of at most
// MaxListedPartitions ids in [0, MaxPartitionID), and formatting it back as
// ranges parses to the same set; a refused one gets a bounded error.
func FuzzParsePartitionLimitation(f *testing.F) {
	for _, s := range []string{
		"", "0", "0,2,10-20", "1, 3-5", "5,0-3,2-4,3,9999", "0-9999", "0-10000", "3-1", "-1", "0--1",
		"0-999999999", "1048575", "1048576", "2147483648", "NaN", "+Inf", "1e300", "+5", "0x10", " 7 ",
		"1,,2", ",", "-", "1-", "\x00", "0-1048575,0-1048575", "4\n5", "٣",
		strings.Repeat("1,", 3000), strings.TrimSuffix(strings.Repeat("0-1048575,", 50), ","),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ids, err := ParsePartitionLimitation(v)
		if err != nil {
			if !names(checkErr(t, err), "partitionLimitation") {
				t.Fatalf("error %q does not name partitionLimitation", err)
			}
			return
		}
		if len(ids) > MaxListedPartitions {
			t.Fatalf("%d ids, want at most %d", len(ids), MaxListedPartitions)
		}
		for i, p := range ids {
			if p < 0 || p >= MaxPartitionID || i > 0 && p <= ids[i-1] {
				t.Fatalf("ids %v: want strictly increasing ids in [0, %d)", ids, MaxPartitionID)
			}
		}
		again, err := ParsePartitionLimitation(formatRanges(ids))
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("round trip of %q through %q = %v, %v; want %v", v, formatRanges(ids), again, err, ids)
		}
	})
}

// formatRanges writes sorted ids the way an operator would: runs as ranges.
func formatRanges(ids []int32) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(ids[i])))
		if j > i {
			b.WriteString("-" + strconv.Itoa(int(ids[j])))
		}
		i = j + 1
	}
	return b.String()
}
