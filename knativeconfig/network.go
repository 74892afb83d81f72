package knativeconfig

import (
	"strings"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// KeyMeshCompatibilityMode is config-network's key for how components reach
// a revision's pods (knative.dev/networking pkg/config).
const KeyMeshCompatibilityMode = "mesh-compatibility-mode"

// MeshMode is config-network's mesh-compatibility-mode.
type MeshMode string

const (
	// MeshAuto scrapes the pods directly and falls back to the revision's
	// private Service when every pod refuses as a mesh does (Knative's
	// default).
	MeshAuto MeshMode = "auto"
	// MeshEnabled always scrapes through the private Service.
	MeshEnabled MeshMode = "enabled"
	// MeshDisabled always scrapes the pods directly.
	MeshDisabled MeshMode = "disabled"
)

// Network is the part of config-network tidal reads.
type Network struct {
	MeshCompatibilityMode MeshMode
}

// DefaultNetwork returns Knative's default: auto.
func DefaultNetwork() Network { return Network{MeshCompatibilityMode: MeshAuto} }

// ParseNetwork parses config-network's mesh-compatibility-mode, case
// insensitively as Knative does. Knative keeps auto for a value it does not
// know; tidal refuses it, as it refuses every bad value, so a typo is
// reported instead of silently scraping another way.
func ParseNetwork(data map[string]string) (Network, error) {
	n := DefaultNetwork()
	v, ok := data[KeyMeshCompatibilityMode]
	if !ok {
		return n, nil
	}
	for _, m := range []MeshMode{MeshAuto, MeshEnabled, MeshDisabled} {
		if strings.EqualFold(strings.TrimSpace(v), string(m)) {
			n.MeshCompatibilityMode = m
			return n, nil
		}
	}
	return Network{}, &kpaconfig.KeyError{Key: KeyMeshCompatibilityMode, Value: v, Reason: "want enabled, disabled or auto"}
}
