// Package servertest lists what a server built on services/server serves,
// from the registered service descriptors, and makes requests of its
// methods, for the authorization tests: the in-process matrix of
// services/server and test/security's matrix against the binaries. A method
// added to a service is in both without anyone listing it.
package servertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	// The descriptors of every service tidal's binaries serve, so that
	// Methods finds them whoever imports this package.
	_ "github.com/tidalscale/tidal/proto/externalscaler"
	_ "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	_ "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	_ "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	_ "google.golang.org/grpc/health/grpc_health_v1"
	_ "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// Methods lists every method of the named services by full name
// (/package.Service/Method) with its stream shape, nil for a unary method,
// read from the services' registered descriptors.
func Methods(services []string) (map[string]*grpc.StreamDesc, error) {
	out := map[string]*grpc.StreamDesc{}
	for _, svc := range services {
		sd, err := service(svc)
		if err != nil {
			return nil, err
		}
		ms := sd.Methods()
		for i := range ms.Len() {
			m := ms.Get(i)
			var desc *grpc.StreamDesc
			if m.IsStreamingClient() || m.IsStreamingServer() {
				desc = &grpc.StreamDesc{StreamName: string(m.Name()), ClientStreams: m.IsStreamingClient(), ServerStreams: m.IsStreamingServer()}
			}
			out["/"+svc+"/"+string(m.Name())] = desc
		}
	}
	return out, nil
}

// Served lists the services registered on srv.
func Served(srv *grpc.Server) []string { return slices.Sorted(maps.Keys(srv.GetServiceInfo())) }

// Listed lists the services the server at conn serves, asked through its
// server reflection: what a running binary registered.
func Listed(ctx context.Context, conn grpc.ClientConnInterface) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("server reflection: %w", err)
	}
	req := &reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}}
	if err := s.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("server reflection: list services: %w", err)
	}
	resp, err := s.Recv()
	if err != nil {
		return nil, fmt.Errorf("server reflection: list services: %w", err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		return nil, fmt.Errorf("server reflection: list services: %s", e.GetErrorMessage())
	}
	var out []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		out = append(out, svc.GetName())
	}
	slices.Sort(out)
	return out, nil
}

// Unserved lists the services that every server built on services/server
// serves (health and reflection) and those declared in the .proto files
// under protoDir, read from the files themselves, that served lacks: a
// service no binary registered is still declared.
func Unserved(protoDir string, served []string) ([]string, error) {
	pkgRE := regexp.MustCompile(`(?m)^package\s+([\w.]+)\s*;`)
	svcRE := regexp.MustCompile(`(?m)^service\s+(\w+)\s*\{`)
	want := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
	declared := 0
	err := filepath.WalkDir(protoDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		svcs := svcRE.FindAllSubmatch(b, -1)
		if len(svcs) == 0 {
			return nil
		}
		pkg := pkgRE.FindSubmatch(b)
		if pkg == nil {
			return fmt.Errorf("%s: services but no package", path)
		}
		for _, m := range svcs {
			want = append(want, string(pkg[1])+"."+string(m[1]))
			declared++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("services declared under %s: %w", protoDir, err)
	}
	if declared == 0 {
		return nil, fmt.Errorf("no service declared under %s", protoDir)
	}
	out := slices.DeleteFunc(want, func(svc string) bool { return slices.Contains(served, svc) })
	slices.Sort(out)
	return out, nil
}

// NamespaceField is the name of every request field naming a namespace
// (services/server's scope check reads the same fields).
const NamespaceField = "namespace"

// RequestIn is a request of method whose every namespace is ns: every
// namespace field set, every message field filled, every list of messages
// given one element, a few levels deep. named says whether the request has
// a namespace field at all, so whether a namespace-bound caller's request
// can fall outside its namespaces.
func RequestIn(method, ns string) (msg proto.Message, named bool, err error) {
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	sd, err := service(svc)
	if err != nil {
		return nil, false, err
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, false, fmt.Errorf("%s: no such method", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil, false, fmt.Errorf("%s: request type: %w", method, err)
	}
	m := mt.New()
	var fill func(m protoreflect.Message, depth int)
	fill = func(m protoreflect.Message, depth int) {
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			switch {
			case fd.IsMap() || depth > 3:
			case fd.Name() == NamespaceField && fd.Kind() == protoreflect.StringKind && !fd.IsList():
				m.Set(fd, protoreflect.ValueOfString(ns))
				named = true
			case fd.Kind() == protoreflect.MessageKind && fd.IsList():
				l := m.Mutable(fd).List()
				el := l.NewElement()
				fill(el.Message(), depth+1)
				l.Append(el)
			case fd.Kind() == protoreflect.MessageKind:
				fill(m.Mutable(fd).Message(), depth+1)
			}
		}
	}
	fill(m, 0)
	return m.Interface(), named, nil
}

// service is the registered descriptor of the service of full name svc.
func service(svc string) (protoreflect.ServiceDescriptor, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service %s: no registered descriptor (import its Go package): %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, not a service", svc, d)
	}
	return sd, nil
}

// Call invokes method on conn with req, decoding any answer as an empty
// message (every response type decodes into it), and returns the status
// the call ended with. A stream that passed the server's checks may run for
// ever (a watch): its first message, or its end, is the answer; a stream
// that sends nothing ends with ctx.
func Call(ctx context.Context, conn grpc.ClientConnInterface, method string, desc *grpc.StreamDesc, req proto.Message) error {
	if desc == nil {
		return conn.Invoke(ctx, method, req, &emptypb.Empty{})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	err = s.RecvMsg(&emptypb.Empty{})
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// Allowed is the policy the issues ask for, method by method: which callers
// get past the check of each method, readers being every caller that may
// read. It is written out apart from the policy's code, so a change to
// either shows in the tests that hold one against the other (services/server's
// matrix in process, test/security's against the binaries).
func Allowed(readers []string) map[string][]string {
	return map[string][]string{
		"/tidal.actuator.v1.ActuatorService/Scale":                       {"decider", "actuator", "operator", "tenant operator"},
		"/tidal.actuator.v1.ActuatorService/Deploy":                      {"deployer", "operator", "tenant operator"},
		"/tidal.actuator.v1.ActuatorService/Undeploy":                    {"deployer", "operator", "tenant operator"},
		"/tidal.actuator.v1.ActuatorService/Update":                      {"deployer", "operator", "tenant operator"},
		"/tidal.actuator.v1.ActuatorService/GetScale":                    readers,
		"/tidal.decider.v1.DeciderService/Ingest":                        {"collector"},
		"/tidal.decider.v1.DeciderService/GetDecision":                   readers,
		"/tidal.decider.v1.DeciderService/ListDecisions":                 readers,
		"/tidal.decider.v1.DeciderService/WatchDecisions":                readers,
		"/tidal.decider.v1.DeciderService/Explain":                       readers,
		"/tidal.collector.v1.CollectorService/PushStats":                 {"pusher"},
		"/tidal.collector.v1.CollectorService/PushStatsStream":           {"pusher"},
		"/tidal.collector.v1.CollectorService/ListTargets":               readers,
		"/tidal.collector.v1.CollectorService/GetWindow":                 readers,
		"/tidal.collector.v1.KEDATargetService/EnsureKEDATarget":         {"collector"},
		"/tidal.collector.v1.ActivatorStatService/ForwardActivatorStats": {"collector"},
		"/externalscaler.ExternalScaler/IsActive":                        {"keda", "operator", "tenant operator"},
		"/externalscaler.ExternalScaler/StreamIsActive":                  {"keda", "operator", "tenant operator"},
		"/externalscaler.ExternalScaler/GetMetricSpec":                   {"keda", "operator", "tenant operator"},
		"/externalscaler.ExternalScaler/GetMetrics":                      {"keda", "operator", "tenant operator"},
		"/externalscaler.ExternalScaler/StreamMetricSpec":                {"keda", "operator", "tenant operator"},
		"/grpc.health.v1.Health/Check":                                   readers,
		"/grpc.health.v1.Health/Watch":                                   readers,
		"/grpc.health.v1.Health/List":                                    readers,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      readers,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": readers,
	}
}
