package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// PeerBuild is a peer project's main packages (Knative's controller, KEDA's
// operator), built in a module of their own inside the checkout, which pins
// every dependency, into tidal's cache outside it: once per go.mod, go.sum
// and Go release, then reused. test/knative and test/keda build with it.
type PeerBuild struct {
	// Cache names the cache directory, under TidalCache, and should carry
	// the peer's version (knative-serving-v0.50.0).
	Cache string
	// What names the binaries in progress lines.
	What string
	// ModuleDir is the module to build in.
	ModuleDir string
	// Packages are the main packages; each binary is named after the last
	// element of its import path.
	Packages []string
	// Flags are extra go build flags (-trimpath), Env extra environment
	// (CGO_ENABLED=0). They are not part of the cache's stamp: change the
	// Cache name with them.
	Flags, Env []string
}

// Binary is the path of pkg's binary in dir, the directory Ensure returns.
func Binary(dir, pkg string) string { return filepath.Join(dir, path.Base(pkg)) }

// Ensure returns the cache directory holding the binaries, building them
// first when one is missing or the cache was built from another go.mod,
// go.sum or Go. A file lock makes concurrent callers wait for one build; it
// runs at nice 10 with a heartbeat on log. A cold build of a peer compiles
// thousands of packages (many minutes on two cores); later calls return at
// once.
func (b PeerBuild) Ensure(ctx context.Context, log io.Writer) (string, error) {
	dir, err := TidalCache(b.Cache)
	if err != nil {
		return "", err
	}
	stamp, err := moduleStamp(b.ModuleDir)
	if err != nil {
		return "", err
	}
	if b.upToDate(dir, stamp) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := LockFile(ctx, dir+".lock", b.What, log)
	if err != nil {
		return "", err
	}
	defer unlock()
	if b.upToDate(dir, stamp) { // built by whoever held the lock before us
		return dir, nil
	}
	start := time.Now()
	fmt.Fprintf(log, "building %s into %s (once per go.mod; minutes on a cold Go build cache)\n", b.What, dir)
	stop := Heartbeat(log, b.What, start)
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		stop()
		return "", fmt.Errorf("build %s: %w", b.What, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	args := append(append([]string{"build"}, b.Flags...), "-o", tmp+"/")
	err = GoBuild(ctx, b.ModuleDir, append(args, b.Packages...), log, b.Env...)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("build %s: stopped after %s (%w); the Go build cache keeps what was compiled, so rerun to resume",
				b.What, time.Since(start).Round(time.Second), ctx.Err())
		}
		return "", fmt.Errorf("build %s: %w", b.What, err)
	}
	for _, pkg := range b.Packages {
		if err := os.Rename(Binary(tmp, pkg), Binary(dir, pkg)); err != nil {
			return "", fmt.Errorf("build %s: %w", b.What, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stamp"), []byte(stamp), 0o644); err != nil {
		return "", fmt.Errorf("cache stamp: %w", err)
	}
	fmt.Fprintf(log, "built %s in %s\n", b.What, time.Since(start).Round(time.Second))
	return dir, nil
}

// upToDate reports whether every binary exists in dir and dir was built
// from the sources that hash to stamp.
func (b PeerBuild) upToDate(dir, stamp string) bool {
	for _, pkg := range b.Packages {
		if _, err := os.Stat(Binary(dir, pkg)); err != nil {
			return false
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "stamp"))
	return err == nil && string(got) == stamp
}

// moduleStamp hashes what a module's binaries are built from: the Go
// release and the module's go.mod and go.sum, which pin every dependency.
func moduleStamp(moduleDir string) (string, error) {
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

// GoModDir is the directory of the module the go command sees from the
// working directory, which must be named name (test/knative's "knative",
// test/keda's "keda"): where a peer's build command runs from.
func GoModDir(name string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if filepath.Base(filepath.Dir(gomod)) != name {
		return "", fmt.Errorf("not inside test/%s (go.mod %s)", name, gomod)
	}
	return filepath.Dir(gomod), nil
}
