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

// eachNamespace calls fn with every namespace msg names, until fn returns
// false. Every string field called namespace counts, set or not, in msg
// and in every message it holds (a TargetRef without a namespace names
// none, ""); map values do not (KEDA's trigger metadata, which the
// external scaler checks itself).
func eachNamespace(msg proto.Message, fn func(ns string) bool) {
	more := true
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := 0; i < fields.Len() && more; i++ {
			fd := fields.Get(i)
			switch {
			case fd.IsMap():
			case fd.Kind() == protoreflect.StringKind && !fd.IsList() && fd.Name() == namespaceField:
				more = fn(m.Get(fd).String())
			case fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind:
			case fd.IsList():
				l := m.Get(fd).List()
				for j := 0; j < l.Len() && more; j++ {
					walk(l.Get(j).Message())
				}
			case m.Has(fd):
				walk(m.Get(fd).Message())
			}
		}
	}
	walk(msg.ProtoReflect())
}

// firstOutOfScope returns the first namespace msg names that scope does
// not hold; a request naming no namespace ("": every one) is outside
// every scope.
func firstOutOfScope(msg proto.Message, scope map[string]bool) (string, bool) {
	var out string
	found := false
	eachNamespace(msg, func(ns string) bool {
		if !scope[ns] {
			out, found = ns, true
		}
		return !found
	})
	return out, found
}

// requestNamespace is the namespace a request is about, for the
// per-namespace budgets: the first its fields name, "" (every namespace)
// when it names none. tidal's reads name one.
func requestNamespace(req any) string {
	msg, ok := req.(proto.Message)
	if !ok {
		return ""
	}
	var out string
	eachNamespace(msg, func(ns string) bool {
		out = ns
		return false
	})
	return out
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
