// Package operator builds KEDA's own operator and metrics API server at the
// version test/keda requires (github.com/kedacore/keda/v2 v2.21.0), once,
// into a cache outside the checkout (cluster.PeerBuild, as test/knative
// builds Knative's controller), so that tests run them as processes against
// the test cluster and kube-controller-manager's HPA reads
// external.metrics.k8s.io from the real metrics server.
package operator

import (
	"context"
	"io"
	"path/filepath"

	"github.com/tidalscale/tidal/test/cluster"
)

// Version is the KEDA module the binaries are built from; it must match
// module/go.mod (a tool line for each binary) and test/keda's go.mod.
const Version = "v2.21.0"

// Binaries are the cached KEDA executables.
type Binaries struct {
	// Dir is the cache directory holding them.
	Dir string
	// Operator is cmd/operator: the ScaledObject and ScaledJob reconcilers,
	// which create the HPAs and poll the scalers for activation.
	Operator string
	// Adapter is cmd/adapter: the external.metrics.k8s.io server the HPA
	// reads metric values from.
	Adapter string
}

// commands are KEDA's main packages built, each into the cache under its
// last path element.
var commands = []string{"github.com/kedacore/keda/v2/cmd/operator", "github.com/kedacore/keda/v2/cmd/adapter"}

const cacheName = "keda-" + Version

// CacheDir returns where the binaries of this version live:
// ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/keda-<version>.
func CacheDir() (string, error) { return cluster.TidalCache(cacheName) }

// EnsureBinaries returns the cached binaries, building them first when the
// cache is missing or was built from another go.mod or Go. moduleDir is
// test/keda; the binaries are built in its module directory, a module of
// their own with KEDA's dependency graph at test/keda's versions (the
// Kubernetes libraries at the test control plane's v0.37.2) without tidal's;
// progress goes to log.
func EnsureBinaries(ctx context.Context, moduleDir string, log io.Writer) (Binaries, error) {
	dir, err := cluster.PeerBuild{
		Cache:     cacheName,
		What:      "KEDA " + Version + "'s operator and metrics API server",
		ModuleDir: filepath.Join(moduleDir, "module"),
		Packages:  commands,
		// No -trimpath and no CGO_ENABLED=0: built as `go test` builds
		// test/keda, so the thousands of packages of KEDA's scalers that
		// test/keda compiles come from the same Go build cache entries.
	}.Ensure(ctx, log)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: dir, Operator: cluster.Binary(dir, commands[0]), Adapter: cluster.Binary(dir, commands[1])}, nil
}

// ModuleDir is test/keda as the go command sees it from the working
// directory.
func ModuleDir() (string, error) { return cluster.GoModDir("keda") }
