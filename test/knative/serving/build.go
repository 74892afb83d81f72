// Package serving builds Knative Serving's own binaries at the version
// this module requires (knative.dev/serving v0.50.0), once, into a cache
// outside the checkout, as test/cluster builds the control plane: the
// controller, which tests run beside tidal, and the autoscaler, which takes
// the PodAutoscalers back once tidal is uninstalled.
package serving

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

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
}

// commands are the Knative Serving main packages built, each into the
// cache under its last path element.
var commands = []string{"knative.dev/serving/cmd/controller", "knative.dev/serving/cmd/autoscaler"}

// CacheDir returns where the binaries of this version live:
// ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/knative-serving-<version>.
func CacheDir() (string, error) { return cluster.TidalCache("knative-serving-" + Version) }

// EnsureBinaries returns the cached binaries, building them first when the
// cache is missing or was built from another go.mod or Go. moduleDir is
// test/knative; the binaries are built in its serving/module, a module of
// their own pinning Knative's dependency versions; progress goes to log. A file lock
// makes concurrent callers wait for one build. A cold build compiles
// Knative's binaries and their dependencies (minutes on two cores) at nice
// 10; later calls return at once.
func EnsureBinaries(ctx context.Context, moduleDir string, log io.Writer) (Binaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	bins := Binaries{Dir: dir, Controller: filepath.Join(dir, "controller"), Autoscaler: filepath.Join(dir, "autoscaler")}
	buildDir := filepath.Join(moduleDir, "serving", "module")
	stamp, err := sourceStamp(buildDir)
	if err != nil {
		return Binaries{}, err
	}
	if upToDate(bins, stamp) {
		return bins, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := cluster.LockFile(ctx, dir+".lock", "Knative's binaries", log)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	if upToDate(bins, stamp) { // built by whoever held the lock before us
		return bins, nil
	}
	start := time.Now()
	fmt.Fprintf(log, "knative: building Knative Serving %s's controller and autoscaler into %s (once per version; minutes on a cold Go build cache)\n", Version, dir)
	stop := cluster.Heartbeat(log, "Knative's binaries", start)
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		stop()
		return Binaries{}, fmt.Errorf("build Knative's binaries: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	err = cluster.GoBuild(ctx, buildDir, append([]string{"build", "-trimpath", "-o", tmp + "/"}, commands...), log, "CGO_ENABLED=0")
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return Binaries{}, fmt.Errorf("build Knative's binaries: stopped after %s (%w); the Go build cache keeps what was compiled, so rerun to resume",
				time.Since(start).Round(time.Second), ctx.Err())
		}
		return Binaries{}, fmt.Errorf("build Knative's binaries: %w", err)
	}
	for _, bin := range []string{bins.Controller, bins.Autoscaler} {
		if err := os.Rename(filepath.Join(tmp, filepath.Base(bin)), bin); err != nil {
			return Binaries{}, fmt.Errorf("build Knative's binaries: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stamp"), []byte(stamp), 0o644); err != nil {
		return Binaries{}, fmt.Errorf("cache stamp: %w", err)
	}
	fmt.Fprintf(log, "knative: built Knative's controller and autoscaler in %s\n", time.Since(start).Round(time.Second))
	return bins, nil
}

// upToDate reports whether the binaries exist and were built from the
// sources that hash to stamp.
func upToDate(b Binaries, stamp string) bool {
	for _, bin := range []string{b.Controller, b.Autoscaler} {
		if _, err := os.Stat(bin); err != nil {
			return false
		}
	}
	got, err := os.ReadFile(filepath.Join(b.Dir, "stamp"))
	return err == nil && string(got) == stamp
}

// sourceStamp hashes what the binaries are built from: the Go release and
// the build module's go.mod and go.sum, which pin every dependency.
func sourceStamp(moduleDir string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(moduleDir, f))
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", f, err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ModuleDir is test/knative as the go command sees it from the working
// directory.
func ModuleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if filepath.Base(filepath.Dir(gomod)) != "knative" {
		return "", fmt.Errorf("not inside test/knative (go.mod %s)", gomod)
	}
	return filepath.Dir(gomod), nil
}
