package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/targetkey"
)

// defaultScaleKinds are the workloads the actuator scales unless the
// operator says otherwise: the apps kinds with a /scale subresource. A
// custom resource with /scale, or a core kind such as a
// ReplicationController, must be listed in --scale-kinds to be scaled.
const defaultScaleKinds = "apps/Deployment,apps/StatefulSet,apps/ReplicaSet"

// groupKind is a kind and its API group ("" for the core group).
type groupKind struct{ group, kind string }

func (g groupKind) String() string {
	if g.group == "" {
		return "core/" + g.kind
	}
	return g.group + "/" + g.kind
}

// scaleKinds is the set of kinds Scale and GetScale accept: a caller of the
// actuator must not reach anything else, Pods above all, through it.
type scaleKinds struct {
	allowed []groupKind
	// refused counts refused calls; nil until register.
	refused prometheus.Counter
}

// RegisterFlags registers --scale-kinds with its default.
func (k *scaleKinds) RegisterFlags(fs *flag.FlagSet) {
	*k = *newScaleKinds()
	fs.Var(k, "scale-kinds", "Comma-separated group/Kind list of the workloads Scale and GetScale may reach, e.g. apps/Deployment or test.tidal.dev/Scalable; core/Kind for the core group. Each needs a /scale subresource.")
}

// String implements flag.Value.
func (k *scaleKinds) String() string {
	if k == nil {
		return ""
	}
	s := make([]string, len(k.allowed))
	for i, g := range k.allowed {
		s[i] = g.String()
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (k *scaleKinds) Set(v string) error {
	var allowed []groupKind
	for e := range strings.SplitSeq(v, ",") {
		e = strings.TrimSpace(e)
		group, kind, ok := strings.Cut(e, "/")
		if group == "core" {
			group = ""
		}
		switch {
		case !ok || kind == "" || !commonv1.IsKind(kind):
			return fmt.Errorf("%q: want group/Kind, e.g. apps/Deployment", commonv1.Prefix(e))
		case group != "" && !commonv1.IsSubdomain(group):
			return fmt.Errorf("%q: the group must be a DNS-1123 subdomain or core", commonv1.Prefix(e))
		case group == "" && kind == "Pod":
			return fmt.Errorf("%q: Pods have no /scale subresource and are never scaled", e)
		}
		if g := (groupKind{group, kind}); !slices.Contains(allowed, g) {
			allowed = append(allowed, g)
		}
	}
	k.allowed = allowed
	return nil
}

// register counts refusals into reg.
func (k *scaleKinds) register(reg prometheus.Registerer) {
	k.refused = promauto.With(reg).NewCounter(prometheus.CounterOpts{
		Name: "tidal_actuator_kind_refused_total",
		Help: "Scale and GetScale calls refused for a target kind not in --scale-kinds.",
	})
}

// check refuses a target whose kind is not allowed, with PERMISSION_DENIED
// naming the field and the kind.
func (k *scaleKinds) check(field string, ref *commonv1.TargetRef) error {
	group, kind := targetkey.GroupKind(ref.GetApiVersion(), ref.GetKind())
	if slices.Contains(k.allowed, groupKind{group, kind}) {
		return nil
	}
	if k.refused != nil {
		k.refused.Inc()
	}
	return status.Errorf(codes.PermissionDenied, "invalid %s.kind %q (%s): this actuator scales only %s (--scale-kinds)",
		field, commonv1.Prefix(kind), commonv1.Prefix(groupKind{group, kind}.String()), k)
}

// newScaleKinds returns the default set.
func newScaleKinds() *scaleKinds {
	k := &scaleKinds{}
	if err := k.Set(defaultScaleKinds); err != nil {
		panic(err) // the default parses
	}
	return k
}

// useKinds makes h accept the kinds k allows, counting refusals into reg.
func (h *handler) useKinds(k *scaleKinds, reg prometheus.Registerer) {
	k.register(reg)
	h.kinds = k
}
