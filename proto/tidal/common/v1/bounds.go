package commonv1

// Bounds every service applies to what a caller sends, so that nothing a
// caller controls grows a process's memory, its logs or its work without
// limit. Each bound is written in the field's comment in the .proto files.

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxQuoted is how many bytes of a refused value an error quotes: enough
	// to recognise it, never enough to turn one bad call into a huge log line.
	MaxQuoted = 64
	// MaxPods bounds every pod or replica count the API accepts (the
	// actuator's MaxReplicas has the same value).
	MaxPods = 100000
	// MaxCount bounds concurrency and request counts: a billion requests in
	// flight or in one second is beyond any real target, and keeping the
	// numbers small keeps the strategies' arithmetic exact.
	MaxCount = 1e9
	// MaxPartitionLags bounds the partitions of one lag sample (as
	// lagconfig bounds partitionLimitation).
	MaxPartitionLags = 10000
	// MaxKeepAliveState bounds the keep-alive policy's memory of a target
	// as it travels (decider → actuator → status → collector → decider):
	// decider/keepalive encodes a full histogram in about 660 bytes.
	MaxKeepAliveState = 1024
)

// ValidateKeepAliveState checks the keep-alive policy's encoded memory: at
// most MaxKeepAliveState bytes of unpadded base64url. What it holds is the
// decider's to check.
func ValidateKeepAliveState(field, v string) error {
	if len(v) > MaxKeepAliveState {
		return Invalid(field, v, fmt.Sprintf("at most %d bytes", MaxKeepAliveState))
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return Invalid(field, v, "unpadded base64url (A-Z, a-z, 0-9, - and _)")
		}
	}
	return nil
}

// Prefix returns v when it is at most MaxQuoted bytes long, else its first
// MaxQuoted bytes (cut at a character boundary) followed by "…". Errors
// quote bad values through it.
func Prefix(v string) string { return Truncate(v, MaxQuoted) }

// Truncate returns v when it is at most n bytes long, else its first n
// bytes (cut at a character boundary) followed by "…".
func Truncate(v string, n int) string {
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n] + "…"
}

// quoted is the part of a refused value an error shows.
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return Prefix(s)
	}
	return Prefix(fmt.Sprint(v))
}

// ValidateCount checks a concurrency or request count: finite, at least 0
// and at most MaxCount.
func ValidateCount(field string, v float64) error {
	if !IsCount(v) {
		return Invalid(field, v, fmt.Sprintf("a finite number from 0 to %g", float64(MaxCount)))
	}
	return nil
}

// IsCount is ValidateCount's allocation-free test.
func IsCount(v float64) bool { return v >= 0 && v <= MaxCount }

// ValidateCountPart checks that part is a valid count no larger than whole
// (proxied concurrency within concurrency, say).
func ValidateCountPart(field string, part, whole float64) error {
	if err := ValidateCount(field, part); err != nil {
		return err
	}
	if part > whole {
		return Invalid(field, part, fmt.Sprintf("at most %v", whole))
	}
	return nil
}

// ValidatePods checks a pod count: 0 to MaxPods.
func ValidatePods(field string, n int32) error {
	if !IsPods(n) {
		return Invalid(field, n, fmt.Sprintf("0 to %d", MaxPods))
	}
	return nil
}

// IsPods is ValidatePods' allocation-free test.
func IsPods(n int32) bool { return n >= 0 && n <= MaxPods }

// ValidateText checks free text that reaches logs, statuses or terminals:
// at most maxBytes bytes of valid UTF-8 without control characters.
func ValidateText(field, v string, maxBytes int) error {
	if len(v) > maxBytes {
		return Invalid(field, v, fmt.Sprintf("at most %d bytes", maxBytes))
	}
	if !IsText(v) {
		return Invalid(field, v, "UTF-8 text without control characters (line breaks, tabs, escapes)")
	}
	return nil
}

// IsText reports whether v is valid UTF-8 without control characters.
func IsText(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
		if v[i] >= utf8.RuneSelf {
			return isTextSlow(v[i:])
		}
	}
	return true
}

func isTextSlow(v string) bool {
	for _, r := range v {
		if unicode.IsControl(r) {
			return false
		}
	}
	// A U+FFFD written out is text; only a byte that decodes to none is not.
	return utf8.ValidString(v)
}

// IsKind reports whether v is a Kubernetes kind as tidal accepts it: empty
// (a Deployment), or 1-63 ASCII letters and digits starting with a letter.
func IsKind(v string) bool {
	if len(v) > 63 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		letter := (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// IsAPIVersion reports whether v is an API version: empty (apps/v1), a
// version of the core group ("v1"), or group/version with a DNS-1123
// subdomain for the group and a DNS-1123 label for the version.
func IsAPIVersion(v string) bool {
	if v == "" {
		return true
	}
	if len(v) > 253 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] == '/' {
			return IsSubdomain(v[:i]) && IsLabel(v[i+1:])
		}
	}
	return IsLabel(v)
}

// MaxTopicBytes is Kafka's own limit on a topic name.
const MaxTopicBytes = 249

// IsTopic reports whether v is a valid Kafka topic name: 1 to MaxTopicBytes
// of a-z, A-Z, 0-9, '.', '_' and '-', and neither "." nor "..".
func IsTopic(v string) bool {
	if v == "" || len(v) > MaxTopicBytes || v == "." || v == ".." {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
