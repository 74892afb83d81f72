package queuestat

import (
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ContentType is the media type of an encoded Stat, as the queue-proxy sends
// it and the scraper requires it.
const ContentType = "application/protobuf"

// Port and Path locate a queue-proxy's metrics endpoint on a pod.
const (
	Port = 9090
	Path = "/metrics"
)

// MaxSize bounds an encoded Stat, as the Knative scraper caps the body it
// reads: six 10-byte fields, a 256-byte pod name and 20 bytes of slack.
const MaxSize = 6*10 + 256 + 20

// Field numbers of Knative's Stat message.
const (
	fieldPodName                          protowire.Number = 1
	fieldAverageConcurrentRequests        protowire.Number = 2
	fieldAverageProxiedConcurrentRequests protowire.Number = 3
	fieldRequestCount                     protowire.Number = 4
	fieldProxiedRequestCount              protowire.Number = 5
	fieldProcessUptime                    protowire.Number = 6
	fieldTimestamp                        protowire.Number = 7
)

// Stat is one queue-proxy report: averages over the last reporting period
// (1 s) of one pod.
type Stat struct {
	// PodName is the name of the reporting pod.
	PodName string
	// AverageConcurrentRequests is the time-weighted mean number of requests
	// in the pod over the period, proxied ones included.
	AverageConcurrentRequests float64
	// AverageProxiedConcurrentRequests is the same mean for requests that came
	// through the activator.
	AverageProxiedConcurrentRequests float64
	// RequestCount is the number of requests that arrived in the period,
	// divided by the period: a rate per second.
	RequestCount float64
	// ProxiedRequestCount is RequestCount for requests from the activator.
	ProxiedRequestCount float64
	// ProcessUptime is the reporter's age in seconds.
	ProcessUptime float64
	// Timestamp is the Unix time of the report in seconds.
	Timestamp int64
}

// Append appends the wire encoding of s to b. Zero-valued fields are left
// out, as proto3 does.
func Append(b []byte, s Stat) []byte {
	if s.PodName != "" {
		b = protowire.AppendTag(b, fieldPodName, protowire.BytesType)
		b = protowire.AppendString(b, s.PodName)
	}
	for _, f := range [...]struct {
		num protowire.Number
		v   float64
	}{
		{fieldAverageConcurrentRequests, s.AverageConcurrentRequests},
		{fieldAverageProxiedConcurrentRequests, s.AverageProxiedConcurrentRequests},
		{fieldRequestCount, s.RequestCount},
		{fieldProxiedRequestCount, s.ProxiedRequestCount},
		{fieldProcessUptime, s.ProcessUptime},
	} {
		// Compare bits, not values, so -0 survives a round trip.
		if math.Float64bits(f.v) != 0 {
			b = protowire.AppendTag(b, f.num, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(f.v))
		}
	}
	if s.Timestamp != 0 {
		b = protowire.AppendTag(b, fieldTimestamp, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.Timestamp))
	}
	return b
}

// Marshal returns the wire encoding of s.
func Marshal(s Stat) []byte { return Append(nil, s) }

// Unmarshal decodes a Stat. It accepts exactly what the protobuf library
// accepts for Knative's message: unknown fields (and known numbers with
// another wire type) are skipped, so a newer queue-proxy still decodes; a
// truncated field or an invalid UTF-8 pod name is an error that names the
// field; a field that occurs twice keeps its last value.
func Unmarshal(b []byte) (Stat, error) {
	var s Stat
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Stat{}, fmt.Errorf("stat: tag: %w", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return Stat{}, fmt.Errorf("stat: field number %d out of range", num)
		}
		b = b[n:]
		// A known field number with another wire type is skipped as unknown,
		// as the protobuf library (and so Knative's scraper) does.
		if want, known := wireTypes[num]; !known || typ != want {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Stat{}, fmt.Errorf("stat: unknown field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		var v uint64
		switch typ {
		case protowire.BytesType:
			var name string
			if name, n = protowire.ConsumeString(b); n >= 0 && !utf8.ValidString(name) {
				// Quote a prefix: a pod's name is not ours to echo whole.
				return Stat{}, fmt.Errorf("stat: field %d (%s): invalid UTF-8 %q (%d bytes)", num, fieldNames[num], name[:min(len(name), 32)], len(name))
			}
			s.PodName = name
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
			*s.float(num) = math.Float64frombits(v)
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			s.Timestamp = int64(v)
		}
		if n < 0 {
			return Stat{}, fmt.Errorf("stat: field %d (%s): %w", num, fieldNames[num], protowire.ParseError(n))
		}
		b = b[n:]
	}
	return s, nil
}

var wireTypes = map[protowire.Number]protowire.Type{
	fieldPodName:                          protowire.BytesType,
	fieldAverageConcurrentRequests:        protowire.Fixed64Type,
	fieldAverageProxiedConcurrentRequests: protowire.Fixed64Type,
	fieldRequestCount:                     protowire.Fixed64Type,
	fieldProxiedRequestCount:              protowire.Fixed64Type,
	fieldProcessUptime:                    protowire.Fixed64Type,
	fieldTimestamp:                        protowire.VarintType,
}

var fieldNames = map[protowire.Number]string{
	fieldPodName:                          "pod_name",
	fieldAverageConcurrentRequests:        "average_concurrent_requests",
	fieldAverageProxiedConcurrentRequests: "average_proxied_concurrent_requests",
	fieldRequestCount:                     "request_count",
	fieldProxiedRequestCount:              "proxied_request_count",
	fieldProcessUptime:                    "process_uptime",
	fieldTimestamp:                        "timestamp",
}

// float returns the address of the double field num.
func (s *Stat) float(num protowire.Number) *float64 {
	switch num {
	case fieldAverageConcurrentRequests:
		return &s.AverageConcurrentRequests
	case fieldAverageProxiedConcurrentRequests:
		return &s.AverageProxiedConcurrentRequests
	case fieldRequestCount:
		return &s.RequestCount
	case fieldProxiedRequestCount:
		return &s.ProxiedRequestCount
	default:
		return &s.ProcessUptime
	}
}
