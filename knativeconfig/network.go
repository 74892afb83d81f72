package knativeconfig

import (
	"strconv"
	"strings"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// KeyMeshCompatibilityMode is config-network's key for how components reach
// a revision's pods (knative.dev/networking pkg/config).
const KeyMeshCompatibilityMode = "mesh-compatibility-mode"

// KeyEnableMeshPodAddressability is config-network's key saying a mesh
// passes requests through to the pod addressed (knative.dev/networking
// pkg/config).
const KeyEnableMeshPodAddressability = "enable-mesh-pod-addressability"

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
	// EnableMeshPodAddressability makes the collector scrape pods with the
	// private Service's host and Knative-Direct-Lb: true, and never fall
	// back to the Service (Knative's usePassthroughLb); default false.
	EnableMeshPodAddressability bool
}

// DefaultNetwork returns Knative's default: auto.
func DefaultNetwork() Network { return Network{MeshCompatibilityMode: MeshAuto} }

// ParseNetwork parses config-network's mesh-compatibility-mode, case
// insensitively as Knative does, and enable-mesh-pod-addressability, as
// strconv.ParseBool reads it (Knative's too). Knative keeps auto for a mode
// it does not know; tidal refuses it, as it refuses every bad value, so a
// typo is reported instead of silently scraping another way.
func ParseNetwork(data map[string]string) (Network, error) {
	n := DefaultNetwork()
	if v, ok := data[KeyEnableMeshPodAddressability]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Network{}, &kpaconfig.KeyError{Key: KeyEnableMeshPodAddressability, Value: v, Reason: "want true or false"}
		}
		n.EnableMeshPodAddressability = b
	}
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
