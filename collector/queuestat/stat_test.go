package queuestat

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// statDescriptor describes the Stat message with the field numbers and types
// of knative.dev/serving v0.50.0 pkg/autoscaler/metrics/stat.proto, so the hand-written codec can be checked
// against the protobuf library's own encoder and decoder.
func statDescriptor(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name:   proto.String(name),
			Number: proto.Int32(num),
			Type:   typ.Enum(),
			Label:  descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("queuestat_test.proto"),
		Package: proto.String("queuestattest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Stat"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("pod_name", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("average_concurrent_requests", 2, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
				field("average_proxied_concurrent_requests", 3, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
				field("request_count", 4, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
				field("proxied_request_count", 5, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
				field("process_uptime", 6, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
				field("timestamp", 7, descriptorpb.FieldDescriptorProto_TYPE_INT64),
			},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

func dynamicStat(md protoreflect.MessageDescriptor, s Stat) *dynamicpb.Message {
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	m.Set(f.ByNumber(1), protoreflect.ValueOfString(s.PodName))
	m.Set(f.ByNumber(2), protoreflect.ValueOfFloat64(s.AverageConcurrentRequests))
	m.Set(f.ByNumber(3), protoreflect.ValueOfFloat64(s.AverageProxiedConcurrentRequests))
	m.Set(f.ByNumber(4), protoreflect.ValueOfFloat64(s.RequestCount))
	m.Set(f.ByNumber(5), protoreflect.ValueOfFloat64(s.ProxiedRequestCount))
	m.Set(f.ByNumber(6), protoreflect.ValueOfFloat64(s.ProcessUptime))
	m.Set(f.ByNumber(7), protoreflect.ValueOfInt64(s.Timestamp))
	return m
}

var stats = map[string]Stat{
	"zero": {},
	"typical": {
		PodName:                   "fn-00001-deployment-7d9f8c-abcde",
		AverageConcurrentRequests: 3.25, RequestCount: 12, ProcessUptime: 61.5, Timestamp: 1_790_000_000,
	},
	"proxied": {
		PodName:                   "p",
		AverageConcurrentRequests: 10, AverageProxiedConcurrentRequests: 4,
		RequestCount: 100, ProxiedRequestCount: 40, ProcessUptime: 1, Timestamp: 1,
	},
	"negative timestamp": {Timestamp: -5, ProcessUptime: math.SmallestNonzeroFloat64},
	"long name":          {PodName: strings.Repeat("x", 253), AverageConcurrentRequests: math.MaxFloat64},
}

func TestMatchesProtobufLibrary(t *testing.T) {
	md := statDescriptor(t)
	for name, s := range stats {
		t.Run(name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(dynamicStat(md, s))
			if err != nil {
				t.Fatal(err)
			}
			if got := Marshal(s); string(got) != string(want) {
				t.Errorf("Marshal = %x, want %x (protobuf library)", got, want)
			}
			got, err := Unmarshal(want)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if got != s {
				t.Errorf("Unmarshal = %+v, want %+v", got, s)
			}
		})
	}
}

func TestEncodedSizeWithinScrapeCap(t *testing.T) {
	s := stats["long name"]
	s.AverageProxiedConcurrentRequests, s.RequestCount, s.ProxiedRequestCount, s.ProcessUptime = 1, 1, 1, 1
	s.Timestamp = math.MinInt64 // the longest varint
	if n := len(Marshal(s)); n > MaxSize {
		t.Errorf("len(Marshal) = %d, want <= MaxSize %d", n, MaxSize)
	}
}

func TestUnmarshalSkipsUnknownFields(t *testing.T) {
	b := protowire.AppendTag(nil, 99, protowire.BytesType)
	b = protowire.AppendString(b, "future")
	b = protowire.AppendTag(b, 100, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = Append(b, stats["typical"])
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := stats["typical"]; got != want {
		t.Errorf("Unmarshal = %+v, want %+v", got, want)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	full := Marshal(stats["typical"])
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"truncated tag", []byte{0x80}, "stat: tag"},
		{"truncated string", full[:5], "field 1 (pod_name)"},
		{"truncated double", Marshal(Stat{RequestCount: 1})[:4], "field 4 (request_count)"},
		{"truncated known number, other wire type", protowire.AppendTag(nil, 2, protowire.BytesType), "unknown field 2"},
		{"bad utf8", protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff}), "invalid UTF-8"},
		{"truncated unknown", protowire.AppendTag(nil, 42, protowire.Fixed32Type), "unknown field 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Unmarshal(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Unmarshal(%x) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

// FuzzUnmarshal checks that the decoder never panics, agrees with the
// protobuf library on what is valid, and that what it accepts re-encodes to
// the same Stat.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range stats {
		f.Add(Marshal(s))
	}
	f.Add([]byte{0x08, 0x01})
	f.Add([]byte{0x3a, 0x00})
	for _, b := range hostileStats {
		f.Add(b)
	}
	md := statDescriptor(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Unmarshal(b)
		m := dynamicpb.NewMessage(md)
		libErr := proto.Unmarshal(b, m)
		if (err == nil) != (libErr == nil) {
			t.Fatalf("Unmarshal(%x) error = %v, protobuf library error = %v", b, err, libErr)
		}
		if err != nil {
			checkErr(t, err)
			return
		}
		if lib := fromDynamic(m); !sameBits(s, lib) {
			t.Fatalf("Unmarshal(%x) = %+v, protobuf library decoded %+v", b, s, lib)
		}
		again, err := Unmarshal(Marshal(s))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !sameBits(again, s) {
			t.Fatalf("round trip = %+v, want %+v", again, s)
		}
	})
}

func fromDynamic(m *dynamicpb.Message) Stat {
	f := m.Descriptor().Fields()
	return Stat{
		PodName:                          m.Get(f.ByNumber(1)).String(),
		AverageConcurrentRequests:        m.Get(f.ByNumber(2)).Float(),
		AverageProxiedConcurrentRequests: m.Get(f.ByNumber(3)).Float(),
		RequestCount:                     m.Get(f.ByNumber(4)).Float(),
		ProxiedRequestCount:              m.Get(f.ByNumber(5)).Float(),
		ProcessUptime:                    m.Get(f.ByNumber(6)).Float(),
		Timestamp:                        m.Get(f.ByNumber(7)).Int(),
	}
}

// sameBits compares two stats bit for bit, so NaN equals NaN.
func sameBits(a, b Stat) bool {
	fa := []float64{a.AverageConcurrentRequests, a.AverageProxiedConcurrentRequests, a.RequestCount, a.ProxiedRequestCount, a.ProcessUptime}
	fb := []float64{b.AverageConcurrentRequests, b.AverageProxiedConcurrentRequests, b.RequestCount, b.ProxiedRequestCount, b.ProcessUptime}
	for i := range fa {
		if math.Float64bits(fa[i]) != math.Float64bits(fb[i]) {
			return false
		}
	}
	return a.PodName == b.PodName && a.Timestamp == b.Timestamp
}
