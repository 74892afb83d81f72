package commonv1

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"
)

// hostileStrings are seeds every string fuzz test here starts from.
var hostileStrings = []string{
	"", "a", "a-b.c", "default", "serving.knative.dev", "Bad_NS", "-a", "a-", "a..b", ".a", "a.-b",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 64) + ".b", strings.Repeat("a.", 126) + "a",
	strings.Repeat("a", 254), "n\x00s", "line\nbreak", "esc\x1b[2J", "del\x7f", "c1\u0085", "bad \xff utf-8",
	"ünïcode → fine", "\ufffd", "é" + strings.Repeat("é", 40), strings.Repeat("\xff", 5000),
}

// checkFieldError asserts what every API refusal must be: a *FieldError
// whose field starts with want, in a short line of UTF-8 without raw
// control characters.
func checkFieldError(t *testing.T, err error, want string) {
	t.Helper()
	var fe *FieldError
	msg := err.Error()
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, want) || !strings.HasPrefix(msg, "invalid "+fe.Field+" ") {
		t.Fatalf("error %q does not name a field under %q", msg, want)
	}
	if len(msg) >= 1024 || !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) {
		t.Fatalf("error of %d bytes, want a short line of UTF-8 text: %.300q", len(msg), msg)
	}
}

// FuzzNames checks the DNS-1123 checks against Kubernetes' own: a name
// tidal accepts is one the API server accepts, and the other way round, so
// no object can be created that tidal then refuses to scale.
func FuzzNames(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := IsLabel(v), len(validation.IsDNS1123Label(v)) == 0; got != want {
			t.Fatalf("IsLabel(%q) = %v, Kubernetes says %v", v, got, want)
		}
		if got, want := IsSubdomain(v), len(validation.IsDNS1123Subdomain(v)) == 0; got != want {
			t.Fatalf("IsSubdomain(%q) = %v, Kubernetes says %v", v, got, want)
		}
		if err := ValidateLabel("namespace", v); err != nil {
			checkFieldError(t, err, "namespace")
		}
		ref := &TargetRef{Namespace: "ns", Name: v, ApiVersion: v, Kind: v}
		if err := ref.ValidateField("target"); err != nil {
			checkFieldError(t, err, "target.")
		} else if strings.Count(ref.Key(), "/") > 2 {
			t.Fatalf("accepted %v has key %q: more than namespace/qualifier/name", ref, ref.Key())
		}
	})
}

// FuzzText checks the free-text helpers: IsText is what its comment says,
// Printable leaves no control character and changes nothing else, and
// Truncate keeps a prefix of at most n bytes that cuts no character.
func FuzzText(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(s, 64)
	}
	f.Add("ééé", 3)
	f.Add("ab", -1)
	f.Fuzz(func(t *testing.T, v string, n int) {
		want := utf8.ValidString(v) && !strings.ContainsFunc(v, unicode.IsControl)
		if got := IsText(v); got != want {
			t.Fatalf("IsText(%q) = %v, want %v", v, got, want)
		}
		p := Printable(v)
		if strings.ContainsFunc(p, unicode.IsControl) || utf8.RuneCountInString(p) != utf8.RuneCountInString(v) || Printable(p) != p {
			t.Fatalf("Printable(%q) = %q", v, p)
		}
		if want && p != v {
			t.Fatalf("Printable changed text without control characters: %q to %q", v, p)
		}
		if n < 0 || n > 1<<20 {
			return
		}
		tr := Truncate(v, n)
		if len(v) <= n {
			if tr != v {
				t.Fatalf("Truncate(%q, %d) = %q, want it whole", v, n, tr)
			}
			return
		}
		head, ok := strings.CutSuffix(tr, "…")
		if !ok || len(head) > n || !strings.HasPrefix(v, head) || utf8.ValidString(v) && !utf8.ValidString(head) {
			t.Fatalf("Truncate(%q, %d) = %q", v, n, tr)
		}
	})
}

// FuzzSample decodes any bytes as a MetricSample and validates it against
// a fixed clock: a refusal names a field under the sample's path; an
// accepted sample has every value within the documented bounds and stays
// accepted through a Marshal/Unmarshal round trip.
func FuzzSample(f *testing.F) {
	now := time.Unix(1700000000, 0)
	i32 := func(v int32) *int32 { return &v }
	i64 := func(v int64) *int64 { return &v }
	for _, s := range []*MetricSample{
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 3, AverageProxiedConcurrency: 1, RequestCount: 4, ReadyPods: i32(2)},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_KAFKA, PartitionCount: i32(3),
			PartitionLags: []*PartitionLag{{Partition: 0, EndOffset: 5, CommittedOffset: i64(9)}, {Partition: 2, EndOffset: 1}}},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_PODS, ReadyPods: i32(0)},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_PODS, ReadyPods: i32(2), AverageConcurrency: 1},
		{Time: timestamppb.New(now.Add(2 * time.Hour)), Source: SampleSource_SAMPLE_SOURCE_PUSH},
		{Time: &timestamppb.Timestamp{Seconds: math.MaxInt64, Nanos: -1}, Source: 99},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: math.NaN(), RequestCount: math.Inf(1)},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_SCRAPE, AverageConcurrency: 1e300, RequestCount: -1},
		{Time: timestamppb.New(now), Source: SampleSource_SAMPLE_SOURCE_SCRAPE, ReadyPods: i32(math.MaxInt32),
			PartitionLags: []*PartitionLag{{Partition: 1}, {Partition: 1}, {Partition: -1, EndOffset: -2, CommittedOffset: i64(-1)}}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s MetricSample
		if proto.Unmarshal(b, &s) != nil {
			return
		}
		if err := s.ValidateField("samples[0]", now); err != nil {
			checkFieldError(t, err, "samples[0]")
			return
		}
		if at := s.GetTime().AsTime(); at.Before(now.Add(-time.Hour)) || at.After(now.Add(time.Hour)) {
			t.Fatalf("accepted a sample at %s, %s from now", at, at.Sub(now))
		}
		for _, p := range [][2]float64{{s.GetAverageProxiedConcurrency(), s.GetAverageConcurrency()}, {s.GetProxiedRequestCount(), s.GetRequestCount()}} {
			if !IsCount(p[0]) || !IsCount(p[1]) || p[0] > p[1] {
				t.Fatalf("accepted part %v of %v", p[0], p[1])
			}
		}
		if s.ReadyPods != nil && (s.GetReadyPods() < 0 || s.GetReadyPods() > MaxPods) {
			t.Fatalf("accepted ready_pods %d", s.GetReadyPods())
		}
		seen := map[int32]bool{}
		for _, p := range s.GetPartitionLags() {
			if p.GetPartition() < 0 || seen[p.GetPartition()] || p.GetEndOffset() < 0 || p.GetCommittedOffset() < 0 {
				t.Fatalf("accepted partition lags %v", s.GetPartitionLags())
			}
			seen[p.GetPartition()] = true
		}
		if len(seen) > MaxPartitionLags {
			t.Fatalf("accepted %d partitions", len(seen))
		}
		again, err := proto.Marshal(&s)
		if err != nil {
			t.Fatalf("Marshal of an accepted sample: %v", err)
		}
		var s2 MetricSample
		if err := proto.Unmarshal(again, &s2); err != nil || !proto.Equal(&s, &s2) {
			t.Fatalf("round trip: %v, equal %v", err, proto.Equal(&s, &s2))
		}
		if err := s2.ValidateField("samples[0]", now); err != nil {
			t.Fatalf("accepted sample refused after a round trip: %v", err)
		}
	})
}

// FuzzPage checks page tokens: any cursor survives PageToken and
// PageCursor, and any request's page fields are either refused with a
// bounded error naming page_size or page_token, or give a token that reads
// and a size within [1, MaxPageSize].
func FuzzPage(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(int32(0), s, s)
	}
	f.Add(int32(-1), "", "")
	f.Add(int32(math.MaxInt32), PageToken("ns/web"), "ns/web")
	f.Add(int32(1), strings.Repeat("A", MaxPageToken+1), "")
	f.Fuzz(func(t *testing.T, size int32, token, cursor string) {
		if c, err := PageCursor(PageToken(cursor)); len(PageToken(cursor)) <= MaxPageToken && (err != nil || c != cursor) {
			t.Fatalf("PageCursor(PageToken(%q)) = %q, %v", cursor, c, err)
		}
		err := ValidatePage(size, token)
		if err != nil {
			checkFieldError(t, err, "page_")
			return
		}
		if _, err := PageCursor(token); err != nil {
			t.Fatalf("ValidatePage accepted %q that PageCursor refuses: %v", token, err)
		}
		if n := PageSize(size); n < 1 || n > MaxPageSize {
			t.Fatalf("PageSize(%d) = %d", size, n)
		}
	})
}
