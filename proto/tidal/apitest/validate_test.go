// Package apitest checks properties every tidal API package must have.
package apitest

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

type validator interface{ Validate() error }

// TestEveryRequestValidates makes sure no RPC can reach a handler unchecked:
// the server's validation interceptor only checks messages with Validate.
func TestEveryRequestValidates(t *testing.T) {
	files := []protoreflect.FileDescriptor{
		actuatorv1.File_tidal_actuator_v1_actuator_service_proto,
		collectorv1.File_tidal_collector_v1_collector_service_proto,
		deciderv1.File_tidal_decider_v1_decider_service_proto,
	}
	n := 0
	for _, fd := range files {
		svcs := fd.Services()
		for i := 0; i < svcs.Len(); i++ {
			methods := svcs.Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				m := methods.Get(j)
				mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
				if err != nil {
					t.Fatalf("%s: %v", m.FullName(), err)
				}
				if _, ok := mt.New().Interface().(validator); !ok {
					t.Errorf("%s: request %s has no Validate method", m.FullName(), m.Input().FullName())
				}
				n++
			}
		}
	}
	if n < 14 {
		t.Errorf("checked %d RPCs, want at least 14", n)
	}
}
