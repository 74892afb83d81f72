package scale

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/targetkey"
)

// DefaultKinds are the workloads the actuator scales unless the operator
// says otherwise: the apps kinds with a /scale subresource. A custom
// resource with /scale, or a core kind such as a ReplicationController,
// must be listed to be scaled.
const DefaultKinds = "apps/Deployment,apps/StatefulSet,apps/ReplicaSet"

// Kinds is the set of kinds a caller of the actuator may reach (Pods above
// all may not), written as a comma-separated group/Kind list, core/Kind for
// the core group. It is a flag.Value.
type Kinds struct{ allowed []schema.GroupKind }

// NewKinds returns DefaultKinds.
func NewKinds() *Kinds {
	k := &Kinds{}
	if err := k.Set(DefaultKinds); err != nil {
		panic(err) // the default parses
	}
	return k
}

// RegisterFlags registers --scale-kinds with its default.
func (k *Kinds) RegisterFlags(fs *flag.FlagSet) {
	*k = *NewKinds()
	fs.Var(k, "scale-kinds", "Comma-separated group/Kind list of the workloads Scale and GetScale may reach, e.g. apps/Deployment or test.tidal.dev/Scalable; core/Kind for the core group. Each needs a /scale subresource.")
}

// KindName writes gk as the list does: group/Kind, core/Kind for the core
// group.
func KindName(gk schema.GroupKind) string {
	if gk.Group == "" {
		return "core/" + gk.Kind
	}
	return gk.Group + "/" + gk.Kind
}

// String implements flag.Value.
func (k *Kinds) String() string {
	if k == nil {
		return ""
	}
	s := make([]string, len(k.allowed))
	for i, g := range k.allowed {
		s[i] = KindName(g)
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (k *Kinds) Set(v string) error {
	var allowed []schema.GroupKind
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
		if g := (schema.GroupKind{Group: group, Kind: kind}); !slices.Contains(allowed, g) {
			allowed = append(allowed, g)
		}
	}
	k.allowed = allowed
	return nil
}

// List is the allowed kinds, in the order given.
func (k *Kinds) List() []schema.GroupKind { return slices.Clone(k.allowed) }

// Allows reports whether a target of apiVersion and kind may be reached,
// and its group and kind.
func (k *Kinds) Allows(apiVersion, kind string) (schema.GroupKind, bool) {
	group, kind := targetkey.GroupKind(apiVersion, kind)
	gk := schema.GroupKind{Group: group, Kind: kind}
	return gk, slices.Contains(k.allowed, gk)
}
