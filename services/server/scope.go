package server

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tidalscale/tidal/identity"
)

// namespaceField is the name every request field naming a namespace has:
// a TargetRef's, a FunctionRef's, KEDA's ScaledObjectRef's, and the filter
// of ListTargets, ListDecisions and WatchDecisions (empty: all of them).
const namespaceField = "namespace"

// firstOutOfScope returns the first namespace msg names that scope does
// not hold. Every string field called namespace counts, set or not, in msg
// and in every message it holds (a TargetRef without a namespace names
// none, which no scope holds); map values do not (KEDA's trigger metadata,
// which the external scaler checks itself).
func firstOutOfScope(msg proto.Message, scope map[string]bool) (string, bool) {
	var out string
	found := false
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := 0; i < fields.Len() && !found; i++ {
			fd := fields.Get(i)
			switch {
			case fd.IsMap():
			case fd.Kind() == protoreflect.StringKind && !fd.IsList() && fd.Name() == namespaceField:
				if ns := m.Get(fd).String(); !scope[ns] {
					out, found = ns, true
				}
			case fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind:
			case fd.IsList():
				l := m.Get(fd).List()
				for j := 0; j < l.Len() && !found; j++ {
					walk(l.Get(j).Message())
				}
			case m.Has(fd):
				walk(m.Get(fd).Message())
			}
		}
	}
	walk(msg.ProtoReflect())
	return out, found
}

// maxScopeNamed bounds how many of a caller's namespaces a refusal lists.
const maxScopeNamed = 8

// checkScope refuses a request of a namespace-bound caller that names a
// namespace outside its scope, with PERMISSION_DENIED naming the method,
// the caller, the namespace and the caller's namespaces.
func checkScope(method, caller string, req any, scope map[string]bool) error {
	msg, ok := req.(proto.Message)
	if !ok || scope == nil {
		return nil
	}
	ns, out := firstOutOfScope(msg, scope)
	if !out {
		return nil
	}
	names := slices.Sorted(maps.Keys(scope))
	more := ""
	if len(names) > maxScopeNamed {
		more = fmt.Sprintf(" and %d more", len(names)-maxScopeNamed)
		names = names[:maxScopeNamed]
	}
	for i, n := range names {
		names[i] = identity.Quote(n)
	}
	what := "namespace " + identity.Quote(ns)
	if ns == "" {
		what = "every namespace (no namespace given)"
	}
	have := "no namespace"
	if len(names) > 0 {
		have = "namespaces " + strings.Join(names, ", ") + more
	}
	return status.Errorf(codes.PermissionDenied, "%s: caller %s may reach only %s (--authz-namespaces); the request names %s", method, identity.Quote(caller), have, what)
}
