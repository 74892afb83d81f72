package activator

import (
	"cmp"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Field numbers of Knative's wire messages (knative.dev/serving v0.50.0,
// pkg/autoscaler/metrics/stat.proto). Frames are decoded by hand rather
// than through generated code so that every bound applies while reading:
// a frame with too many messages is refused at the first one over, and no
// string is copied before its length is checked.
const (
	// WireStatMessages.
	fieldMessages protowire.Number = 1
	// WireStatMessage.
	fieldNamespace protowire.Number = 1
	fieldName      protowire.Number = 2
	fieldStat      protowire.Number = 3
	// Stat.
	fieldPodName                   protowire.Number = 1
	fieldAverageConcurrentRequests protowire.Number = 2
	fieldAverageProxiedConcurrent  protowire.Number = 3
	fieldRequestCount              protowire.Number = 4
	fieldProxiedRequestCount       protowire.Number = 5
	fieldProcessUptime             protowire.Number = 6
	fieldTimestamp                 protowire.Number = 7
)

// maxPodName bounds a Stat's pod_name, as PushStats bounds its pod_name.
const maxPodName = 253

// Stat is one activator's report about one revision: a WireStatMessage
// with its Stat, checked.
type Stat struct {
	// Namespace and Name name the revision (Knative's PodAutoscaler).
	Namespace, Name string
	// PodName is the reporting activator's pod.
	PodName string
	// AverageConcurrency is the requests in flight at the activator,
	// averaged over its report period; AverageProxiedConcurrency the part
	// it proxied (Knative's activator leaves it 0).
	AverageConcurrency, AverageProxiedConcurrency float64
	// RequestCount and ProxiedRequestCount count requests since the last
	// report.
	RequestCount, ProxiedRequestCount float64
}

// Frame is one decoded WireStatMessages.
type Frame struct {
	// Stats are the valid messages, in frame order.
	Stats []Stat
	// Invalid counts messages skipped for a bad field; FirstInvalid says
	// why the first was.
	Invalid      int
	FirstInvalid error
	// NoStat counts messages without a Stat, which Knative's autoscaler
	// skips too (room for schema changes).
	NoStat int
}

// Decode reads one binary frame. A frame that is not a WireStatMessages
// (bytes that do not parse, a known field of the wrong wire type) or that
// holds more than maxMessages messages is refused whole; a message with a
// bad field is skipped and counted, and the others are kept. Unknown fields
// are skipped, as protobuf readers do. The process_uptime and timestamp
// fields are read and ignored: the receiver stamps each stat with its own
// arrival second, so a caller cannot place stats in the past or future.
func Decode(b []byte, maxMessages int) (Frame, error) {
	var f Frame
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return Frame{}, malformed("messages", protowire.ParseError(l))
		}
		b = b[l:]
		if num != fieldMessages {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return Frame{}, malformed(fmt.Sprintf("field %d", num), protowire.ParseError(l))
			}
			b = b[l:]
			continue
		}
		if typ != protowire.BytesType {
			return Frame{}, malformedError{commonv1.Invalid("messages", fmt.Sprintf("wire type %d", typ), "length-delimited WireStatMessage")}
		}
		msg, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return Frame{}, malformed(fmt.Sprintf("messages[%d]", n), protowire.ParseError(l))
		}
		b = b[l:]
		if n == maxMessages {
			return Frame{}, commonv1.Invalid("messages", fmt.Sprintf("more than %d entries", maxMessages), fmt.Sprintf("at most %d WireStatMessages in one frame", maxMessages))
		}
		s, hasStat, err := decodeMessage(msg, n)
		n++
		switch {
		case err != nil && isMalformed(err):
			return Frame{}, err
		case err != nil:
			f.Invalid++
			if f.FirstInvalid == nil {
				f.FirstInvalid = err
			}
		case !hasStat:
			f.NoStat++
		default:
			f.Stats = append(f.Stats, s)
		}
	}
	return f, nil
}

// malformedError is a frame whose bytes are not the protobuf they claim.
type malformedError struct{ err error }

func (e malformedError) Error() string { return e.err.Error() }
func (e malformedError) Unwrap() error { return e.err }

func malformed(field string, err error) error {
	return malformedError{fmt.Errorf("%s: not protobuf WireStatMessages: %w", field, err)}
}

func isMalformed(err error) bool {
	var m malformedError
	return errors.As(err, &m)
}

// decodeMessage reads one WireStatMessage (index i in its frame).
func decodeMessage(b []byte, i int) (s Stat, hasStat bool, err error) {
	field := fmt.Sprintf("messages[%d]", i)
	var ns, name []byte
	var badStat error
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return Stat{}, false, malformed(field, protowire.ParseError(l))
		}
		b = b[l:]
		switch num {
		case fieldNamespace, fieldName, fieldStat:
			if typ != protowire.BytesType {
				return Stat{}, false, malformedError{fmt.Errorf("%s field %d: wire type %d, want length-delimited", field, num, typ)}
			}
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return Stat{}, false, malformed(field, protowire.ParseError(l))
			}
			b = b[l:]
			switch num {
			case fieldNamespace:
				ns = v
			case fieldName:
				name = v
			default:
				// A repeated message field merges, as protobuf readers do.
				hasStat = true
				if err := decodeStat(v, &s, field+".stat"); err != nil {
					if isMalformed(err) {
						return Stat{}, false, err
					}
					badStat = err
				}
			}
		default:
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return Stat{}, false, malformed(field, protowire.ParseError(l))
			}
			b = b[l:]
		}
	}
	// Check lengths before copying: a hostile name costs no allocation.
	if len(ns) > 63 || !commonv1.IsLabel(string(ns)) || len(ns) == 0 {
		return Stat{}, false, commonv1.ValidateLabel(field+".namespace", string(ns[:min(len(ns), 64)]))
	}
	if len(name) > 253 || len(name) == 0 || !commonv1.IsSubdomain(string(name)) {
		return Stat{}, false, commonv1.ValidateSubdomain(field+".name", string(name[:min(len(name), 254)]))
	}
	if !hasStat {
		return Stat{}, false, nil
	}
	if badStat != nil {
		return Stat{}, false, badStat
	}
	if s.PodName == "" {
		return Stat{}, false, commonv1.Invalid(field+".stat.pod_name", "", fmt.Sprintf("1 to %d bytes", maxPodName))
	}
	if err := checkCounts(field+".stat", &s); err != nil {
		return Stat{}, false, err
	}
	s.Namespace, s.Name = string(ns), string(name)
	return s, true, nil
}

// decodeStat reads a Stat into s.
func decodeStat(b []byte, s *Stat, field string) error {
	var bad error
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return malformedError{fmt.Errorf("%s: not protobuf Stat: %w", field, protowire.ParseError(l))}
		}
		b = b[l:]
		var want protowire.Type
		switch num {
		case fieldPodName:
			want = protowire.BytesType
		case fieldAverageConcurrentRequests, fieldAverageProxiedConcurrent, fieldRequestCount, fieldProxiedRequestCount, fieldProcessUptime:
			want = protowire.Fixed64Type
		case fieldTimestamp:
			want = protowire.VarintType
		default:
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return malformedError{fmt.Errorf("%s field %d: %w", field, num, protowire.ParseError(l))}
			}
			b = b[l:]
			continue
		}
		if typ != want {
			return malformedError{fmt.Errorf("%s field %d: wire type %d, want %d", field, num, typ, want)}
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return malformedError{fmt.Errorf("%s field %d: %w", field, num, protowire.ParseError(l))}
		}
		v := b[:l]
		b = b[l:]
		switch num {
		case fieldPodName:
			p, _ := protowire.ConsumeBytes(v)
			if len(p) > maxPodName || !commonv1.IsText(string(p)) {
				if bad == nil {
					bad = commonv1.ValidateText(field+".pod_name", string(p[:min(len(p), maxPodName+1)]), maxPodName)
				}
				continue
			}
			s.PodName = string(p)
		case fieldAverageConcurrentRequests:
			s.AverageConcurrency = fixedFloat(v)
		case fieldAverageProxiedConcurrent:
			s.AverageProxiedConcurrency = fixedFloat(v)
		case fieldRequestCount:
			s.RequestCount = fixedFloat(v)
		case fieldProxiedRequestCount:
			s.ProxiedRequestCount = fixedFloat(v)
		}
	}
	return bad
}

func fixedFloat(v []byte) float64 {
	u, _ := protowire.ConsumeFixed64(v)
	return math.Float64frombits(u)
}

// checkCounts applies PushStats's bounds to a stat's numbers, under
// Knative's field names.
func checkCounts(field string, s *Stat) error {
	return cmp.Or( // the first error
		commonv1.ValidateCount(field+".average_concurrent_requests", s.AverageConcurrency),
		commonv1.ValidateCountPart(field+".average_proxied_concurrent_requests", s.AverageProxiedConcurrency, s.AverageConcurrency),
		commonv1.ValidateCount(field+".request_count", s.RequestCount),
		commonv1.ValidateCountPart(field+".proxied_request_count", s.ProxiedRequestCount, s.RequestCount))
}
