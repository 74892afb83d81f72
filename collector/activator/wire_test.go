package activator

import (
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// wireStat is a Knative Stat to encode; the encoders below write Knative's
// field numbers (stat.proto, v0.50.0) by hand.
type wireStat struct {
	pod                                      string
	conc, proxiedConc, requests, proxiedReqs float64
	uptime                                   float64
	timestamp                                int64
}

func appendStat(b []byte, s wireStat) []byte {
	b = protowire.AppendTag(b, fieldPodName, protowire.BytesType)
	b = protowire.AppendString(b, s.pod)
	for _, f := range []struct {
		n protowire.Number
		v float64
	}{{fieldAverageConcurrentRequests, s.conc}, {fieldAverageProxiedConcurrent, s.proxiedConc}, {fieldRequestCount, s.requests}, {fieldProxiedRequestCount, s.proxiedReqs}, {fieldProcessUptime, s.uptime}} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.n, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(f.v))
		}
	}
	if s.timestamp != 0 {
		b = protowire.AppendTag(b, fieldTimestamp, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.timestamp))
	}
	return b
}

func appendMessage(b []byte, ns, name string, s *wireStat) []byte {
	var m []byte
	m = protowire.AppendTag(m, fieldNamespace, protowire.BytesType)
	m = protowire.AppendString(m, ns)
	m = protowire.AppendTag(m, fieldName, protowire.BytesType)
	m = protowire.AppendString(m, name)
	if s != nil {
		m = protowire.AppendTag(m, fieldStat, protowire.BytesType)
		m = protowire.AppendBytes(m, appendStat(nil, *s))
	}
	b = protowire.AppendTag(b, fieldMessages, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// frameOf encodes one message per revision name, all in namespace ns.
func frameOf(ns string, s wireStat, names ...string) []byte {
	var b []byte
	for _, n := range names {
		b = appendMessage(b, ns, n, &s)
	}
	return b
}

// knativeFrame is what Knative's own code (asmetrics.ToWireStatMessages,
// then Marshal, knative.dev/serving v0.50.0) writes for two stats:
// shop/cart-00001 with concurrency 1.5 and 3 requests, and shop/pay-00002
// with the first-request stat (concurrency 1, 1 request), both from
// activator-abc. test/knative's TestDecodeKnativeBytes prints it.
const knativeFrame = "0a350a0473686f70120a636172742d30303030311a210a0d616374697661746f722d61626311000000000000f83f210000000000000840" +
	"0a340a0473686f7012097061792d30303030321a210a0d616374697661746f722d61626311000000000000f03f21000000000000f03f"

func TestDecodeKnativeFrame(t *testing.T) {
	b, err := hex.DecodeString(knativeFrame)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(b, 10)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := []Stat{
		{Namespace: "shop", Name: "cart-00001", PodName: "activator-abc", AverageConcurrency: 1.5, RequestCount: 3},
		{Namespace: "shop", Name: "pay-00002", PodName: "activator-abc", AverageConcurrency: 1, RequestCount: 1},
	}
	if !reflect.DeepEqual(f.Stats, want) || f.Invalid != 0 || f.NoStat != 0 {
		t.Errorf("Decode = %+v, want stats %+v", f, want)
	}
	// The encoder the other tests use writes the same bytes.
	var mine []byte
	mine = appendMessage(mine, "shop", "cart-00001", &wireStat{pod: "activator-abc", conc: 1.5, requests: 3})
	mine = appendMessage(mine, "shop", "pay-00002", &wireStat{pod: "activator-abc", conc: 1, requests: 1})
	if got := hex.EncodeToString(mine); got != knativeFrame {
		t.Errorf("test encoder = %s, want Knative's %s", got, knativeFrame)
	}
}

func TestDecode(t *testing.T) {
	good := wireStat{pod: "activator-abc", conc: 2.5, proxiedConc: 0.5, requests: 7, proxiedReqs: 2, uptime: 99, timestamp: 1700000000}
	want := Stat{Namespace: "shop", Name: "cart", PodName: "activator-abc", AverageConcurrency: 2.5, AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 2}
	// unknown fields of every wire type at every level.
	var unknownTop []byte
	unknownTop = protowire.AppendTag(unknownTop, 9, protowire.VarintType)
	unknownTop = protowire.AppendVarint(unknownTop, 5)
	unknownTop = protowire.AppendTag(unknownTop, 10, protowire.BytesType)
	unknownTop = protowire.AppendString(unknownTop, "future")
	tests := []struct {
		name        string
		frame       []byte
		max         int
		want        []Stat
		invalid     int
		noStat      int
		invalidWant string // part of FirstInvalid
		err         string // part of the frame's refusal
	}{
		{name: "one stat", frame: frameOf("shop", good, "cart"), max: 10, want: []Stat{want}},
		{name: "empty frame", frame: nil, max: 10},
		{name: "unknown fields are skipped", frame: append(unknownTop, frameOf("shop", good, "cart")...), max: 10, want: []Stat{want}},
		{name: "a message without a stat is skipped", frame: appendMessage(frameOf("shop", good, "cart"), "shop", "pay", nil), max: 10, want: []Stat{want}, noStat: 1},
		{name: "a bad namespace skips its message only", frame: append(frameOf("Shop_1", good, "cart"), frameOf("shop", good, "cart")...), max: 10, want: []Stat{want}, invalid: 1, invalidWant: `messages[0].namespace "Shop_1"`},
		{name: "no name", frame: frameOf("shop", good, ""), max: 10, invalid: 1, invalidWant: "messages[0].name"},
		{name: "a long name is quoted in part", frame: frameOf("shop", good, strings.Repeat("a", 5000)), max: 10, invalid: 1, invalidWant: "messages[0].name"},
		{name: "negative concurrency", frame: frameOf("shop", wireStat{pod: "a", conc: -1}, "cart"), max: 10, invalid: 1, invalidWant: "messages[0].stat.average_concurrent_requests"},
		{name: "NaN requests", frame: frameOf("shop", wireStat{pod: "a", requests: math.NaN()}, "cart"), max: 10, invalid: 1, invalidWant: "messages[0].stat.request_count"},
		{name: "proxied above the whole", frame: frameOf("shop", wireStat{pod: "a", requests: 1, proxiedReqs: 2}, "cart"), max: 10, invalid: 1, invalidWant: "messages[0].stat.proxied_request_count"},
		{name: "no pod name", frame: frameOf("shop", wireStat{conc: 1}, "cart"), max: 10, invalid: 1, invalidWant: "messages[0].stat.pod_name"},
		{name: "a pod name with a line break", frame: frameOf("shop", wireStat{pod: "a\nb", conc: 1}, "cart"), max: 10, invalid: 1, invalidWant: "messages[0].stat.pod_name"},
		{name: "at the message bound", frame: frameOf("shop", good, "a", "b", "c"), max: 3, want: []Stat{
			{Namespace: "shop", Name: "a", PodName: "activator-abc", AverageConcurrency: 2.5, AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 2},
			{Namespace: "shop", Name: "b", PodName: "activator-abc", AverageConcurrency: 2.5, AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 2},
			{Namespace: "shop", Name: "c", PodName: "activator-abc", AverageConcurrency: 2.5, AverageProxiedConcurrency: 0.5, RequestCount: 7, ProxiedRequestCount: 2}}},
		{name: "over the message bound", frame: frameOf("shop", good, "a", "b", "c", "d"), max: 3, err: "more than 3 entries"},
		{name: "garbage", frame: []byte("GET / HTTP/1.1\r\n\r\n"), max: 10, err: "not protobuf"},
		{name: "a truncated frame", frame: frameOf("shop", good, "cart")[:20], max: 10, err: "not protobuf"},
		{name: "messages as a varint", frame: protowire.AppendVarint(protowire.AppendTag(nil, fieldMessages, protowire.VarintType), 1), max: 10, err: "messages"},
		{name: "a stat field of the wrong wire type", frame: func() []byte {
			m := protowire.AppendTag(nil, fieldNamespace, protowire.BytesType)
			m = protowire.AppendString(m, "shop")
			m = protowire.AppendTag(m, fieldStat, protowire.BytesType)
			m = protowire.AppendBytes(m, protowire.AppendVarint(protowire.AppendTag(nil, fieldRequestCount, protowire.VarintType), 3))
			return protowire.AppendBytes(protowire.AppendTag(nil, fieldMessages, protowire.BytesType), m)
		}(), max: 10, err: "messages[0].stat field 4: wire type 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Decode(tt.frame, tt.max)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Decode error = %v, want one containing %q", err, tt.err)
				}
				if len(err.Error()) > 300 {
					t.Errorf("error of %d bytes: want a bounded quote", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(f.Stats, tt.want) && (len(f.Stats) > 0 || len(tt.want) > 0) {
				t.Errorf("stats = %+v, want %+v", f.Stats, tt.want)
			}
			if f.Invalid != tt.invalid || f.NoStat != tt.noStat {
				t.Errorf("invalid, no stat = %d, %d; want %d, %d", f.Invalid, f.NoStat, tt.invalid, tt.noStat)
			}
			switch {
			case tt.invalidWant == "" && f.FirstInvalid != nil:
				t.Errorf("FirstInvalid = %v, want nil", f.FirstInvalid)
			case tt.invalidWant != "" && (f.FirstInvalid == nil || !strings.Contains(f.FirstInvalid.Error(), tt.invalidWant)):
				t.Errorf("FirstInvalid = %v, want one containing %q", f.FirstInvalid, tt.invalidWant)
			case f.FirstInvalid != nil && len(f.FirstInvalid.Error()) > 300:
				t.Errorf("FirstInvalid of %d bytes: want a bounded quote", len(f.FirstInvalid.Error()))
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(frameOf("shop", wireStat{pod: "a", conc: 1, requests: 1}, "cart", "pay"), 10)
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, 10)
	f.Add(appendMessage(nil, "shop", "x", nil), 1)
	f.Fuzz(func(t *testing.T, b []byte, maxMessages int) {
		maxMessages = 1 + abs(maxMessages)%100
		fr, err := Decode(b, maxMessages)
		if err != nil {
			if len(err.Error()) > 400 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if n := len(fr.Stats) + fr.Invalid + fr.NoStat; n > maxMessages {
			t.Fatalf("%d messages kept with a bound of %d", n, maxMessages)
		}
		for _, s := range fr.Stats {
			if s.Namespace == "" || s.Name == "" || s.PodName == "" || checkCounts("stat", &s) != nil {
				t.Fatalf("kept an invalid stat %+v", s)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
