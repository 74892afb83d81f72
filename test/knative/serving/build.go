// Package serving builds Knative Serving's own binaries at the version
// this module requires (knative.dev/serving v0.50.0), once, into a cache
// outside the checkout, as test/cluster builds the control plane: the
// controller, which tests run beside tidal, the autoscaler, which takes the
// PodAutoscalers back once tidal is uninstalled, and the activator, which
// requests go through.
package serving

import (
	"context"
	"io"
	"path/filepath"

	"github.com/tidalscale/tidal/test/cluster"
)

// Version is the Knative Serving module the binaries are built from; it
// must match module/go.mod (a tool line for each binary).
const Version = "v0.50.0"

// Binaries are the cached Knative Serving executables.
type Binaries struct {
	// Dir is the cache directory holding them.
	Dir string
	// Controller is cmd/controller: the Service, Configuration, Revision,
	// Route and ServerlessService reconcilers.
	Controller string
	// Autoscaler is cmd/autoscaler: Knative's own KPA, the component
	// tidal replaces.
	Autoscaler string
	// Activator is cmd/activator: Knative's request buffer in front of a
	// revision at zero or short of capacity, which reports its stats to
	// the autoscaler (tidal's collector in Knative mode).
	Activator string
}

// commands are the Knative Serving main packages built, each into the
// cache under its last path element.
var commands = []string{"knative.dev/serving/cmd/controller", "knative.dev/serving/cmd/autoscaler", "knative.dev/serving/cmd/activator"}

// CacheDir returns where the binaries of this version live:
// ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/knative-serving-<version>.
func CacheDir() (string, error) { return cluster.TidalCache(cacheName) }

const cacheName = "knative-serving-" + Version

// EnsureBinaries returns the cached binaries, building them first when the
// cache is missing or was built from another go.mod or Go. moduleDir is
// test/knative; the binaries are built in its serving/module, a module of
// their own pinning Knative's dependency versions (cluster.PeerBuild);
// progress goes to log.
func EnsureBinaries(ctx context.Context, moduleDir string, log io.Writer) (Binaries, error) {
	dir, err := cluster.PeerBuild{
		Cache:     cacheName,
		What:      "Knative Serving " + Version + "'s controller, autoscaler and activator",
		ModuleDir: filepath.Join(moduleDir, "serving", "module"),
		Packages:  commands,
		Flags:     []string{"-trimpath"},
		Env:       []string{"CGO_ENABLED=0"},
	}.Ensure(ctx, log)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: dir, Controller: cluster.Binary(dir, commands[0]), Autoscaler: cluster.Binary(dir, commands[1]),
		Activator: cluster.Binary(dir, commands[2])}, nil
}

// ModuleDir is test/knative as the go command sees it from the working
// directory.
func ModuleDir() (string, error) { return cluster.GoModDir("knative") }
