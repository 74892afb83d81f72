package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Versions of the control plane. Changing one means changing hack/kube's
// go.mod (or hack/kube/kwok's) too; the cache directory is keyed by them.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
	KwokVersion       = "v0.8.0"
)

// kwokStages are the stage definitions kwok needs to move fake nodes and pods
// through their lifecycle, as paths inside the kwok module. They are read from
// the module cache at build time and concatenated into one file in the cache.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat/node-heartbeat.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// Binaries are the cached control-plane executables.
type Binaries struct {
	// Dir is the cache directory holding them.
	Dir string
	// Kube is the multi-call binary built from hack/kube: its first argument
	// picks etcd, kube-apiserver, kube-controller-manager or kube-scheduler.
	Kube string
	// Kwok is kwok's binary, built from hack/kube/kwok.
	Kwok string
	// KwokStages is the stage file to pass to kwok with -c.
	KwokStages string
}

// CacheDir returns where the binaries of this version live:
// ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/kube-<version>.
func CacheDir() (string, error) { return TidalCache("kube-" + KubernetesVersion) }

// TidalCache returns the directory name has in tidal's cache outside any
// checkout: ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/<name>.
func TidalCache(name string) (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "tidal", name), nil
}

// EnsureBinaries returns the cached control-plane binaries, building them
// first if the cache is missing or was built from other sources. Progress
// goes to log. A file lock makes concurrent callers (two test binaries, or a
// test beside `make run`) wait for one build instead of racing.
//
// A cold build compiles Kubernetes from source and takes many minutes on two
// cores; it runs at nice 10 so it yields to interactive work. Later calls
// return at once.
func EnsureBinaries(ctx context.Context, log io.Writer) (Binaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	bins := Binaries{
		Dir:        dir,
		Kube:       filepath.Join(dir, "kube"),
		Kwok:       filepath.Join(dir, "kwok"),
		KwokStages: filepath.Join(dir, "kwok-stages.yaml"),
	}
	src, err := sourceDir()
	if err != nil {
		return Binaries{}, err
	}
	stamp, err := sourceStamp(src)
	if err != nil {
		return Binaries{}, err
	}
	if upToDate(bins, stamp) {
		return bins, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := LockFile(ctx, dir+".lock", "the control plane", log)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	if upToDate(bins, stamp) { // built by whoever held the lock before us
		return bins, nil
	}

	start := time.Now()
	fmt.Fprintf(log, "test/cluster: building the Kubernetes %s control plane (etcd %s, kwok %s) into %s\n"+
		"test/cluster: this happens once per version and takes many minutes on a cold Go build cache; later runs reuse it\n",
		KubernetesVersion, EtcdVersion, KwokVersion, dir)

	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=" + strings.Split(KubernetesVersion, ".")[1],
		"-X k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	steps := []struct {
		what, dir, out string
		args           []string
	}{
		{"kwok " + KwokVersion, filepath.Join(src, "kwok"), bins.Kwok,
			[]string{"build", "-o", bins.Kwok + ".tmp", "sigs.k8s.io/kwok/cmd/kwok"}},
		{"etcd, kube-apiserver, kube-controller-manager, kube-scheduler (one multi-call binary)", src, bins.Kube,
			[]string{"build", "-o", bins.Kube + ".tmp", "-ldflags", ldflags, "."}},
	}
	for _, s := range steps {
		t0 := time.Now()
		fmt.Fprintf(log, "test/cluster: go build %s ...\n", s.what)
		stopHeartbeat := Heartbeat(log, s.what, t0)
		err := GoBuild(ctx, s.dir, s.args, log)
		stopHeartbeat()
		if err != nil {
			if ctx.Err() != nil {
				return Binaries{}, fmt.Errorf("build %s: stopped after %s (%w); the Go build cache keeps what was compiled, "+
					"so rerun to resume, with a longer go test -timeout (a cold build takes about 10 minutes on 2 cores) "+
					"or after `go run ./test/cluster/cmd/testcluster build`", s.what, time.Since(t0).Round(time.Second), ctx.Err())
			}
			return Binaries{}, fmt.Errorf("build %s: %w", s.what, err)
		}
		if err := os.Rename(s.out+".tmp", s.out); err != nil {
			return Binaries{}, fmt.Errorf("build %s: %w", s.what, err)
		}
		fmt.Fprintf(log, "test/cluster: built %s in %s\n", s.what, time.Since(t0).Round(time.Second))
	}
	if err := writeKwokStages(ctx, filepath.Join(src, "kwok"), bins.KwokStages); err != nil {
		return Binaries{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "stamp"), []byte(stamp), 0o644); err != nil {
		return Binaries{}, fmt.Errorf("cache stamp: %w", err)
	}
	fmt.Fprintf(log, "test/cluster: control plane ready in %s after %s\n", dir, time.Since(start).Round(time.Second))
	return bins, nil
}

// Heartbeat prints a line every 30 s until stopped, so a long cold build
// does not look like a hang in CI logs. test/knative builds Knative's
// binaries with it.
func Heartbeat(log io.Writer, what string, since time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(log, "test/cluster: still building %s (%s so far)\n", what, time.Since(since).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// upToDate reports whether every cached file exists and the cache was built
// from the sources that hash to stamp.
func upToDate(b Binaries, stamp string) bool {
	for _, f := range []string{b.Kube, b.Kwok, b.KwokStages} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	got, err := os.ReadFile(filepath.Join(b.Dir, "stamp"))
	return err == nil && string(got) == stamp
}

// sourceDir finds hack/kube in the checkout: beside the main module's
// go.mod, as the go command sees it from the working directory, or beside
// the nearest go.mod above it, for a module nested in the checkout (test/keda).
func sourceDir() (string, error) {
	out, err := exec.Command(goCmd(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("test/cluster: not inside the tidal module: cannot find hack/kube")
	}
	for root := filepath.Dir(gomod); ; {
		dir := filepath.Join(root, "hack", "kube")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(root)
		if up == root {
			return "", fmt.Errorf("test/cluster: no hack/kube/go.mod beside %s or in a directory above it", gomod)
		}
		root = up
	}
}

// sourceStamp hashes what the binaries are built from, so a cache built from
// other sources (a version bump in hack/kube) is rebuilt, not reused.
func sourceStamp(src string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, f := range []string{"go.mod", "go.sum", "main.go", "kwok/go.mod", "kwok/go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("hash hack/kube: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// GoBuild runs the go command at nice 10 in dir, in its own process group
// (killed with it when ctx ends or this process dies), sending its output to
// log; env adds variables (CGO_ENABLED=0) after the fixed GOFLAGS and GOWORK.
// test/knative builds Knative's binaries with it.
func GoBuild(ctx context.Context, dir string, args []string, log io.Writer, env ...string) error {
	cmd := exec.CommandContext(ctx, goCmd(), args...)
	if nice, err := exec.LookPath("nice"); err == nil {
		cmd = exec.CommandContext(ctx, nice, append([]string{"-n", "10", goCmd()}, args...)...)
	}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	// Never let a GOFLAGS=-mod=vendor or a workspace from the caller's
	// environment leak into the separate modules under hack/kube.
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd.Run()
}

func writeKwokStages(ctx context.Context, kwokModDir, dst string) error {
	cmd := exec.CommandContext(ctx, goCmd(), "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	cmd.Dir = kwokModDir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("locate kwok module: %w", err)
	}
	modDir := strings.TrimSpace(string(out))
	var docs []string
	for _, p := range kwokStages {
		b, err := os.ReadFile(filepath.Join(modDir, p))
		if err != nil {
			return fmt.Errorf("kwok stages: %w", err)
		}
		docs = append(docs, strings.TrimSpace(string(b)))
	}
	if err := os.WriteFile(dst+".tmp", []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("kwok stages: %w", err)
	}
	return os.Rename(dst+".tmp", dst)
}

// LockFile takes an exclusive flock on path, telling log (naming what is
// being built) if it has to wait: one process builds a cached binary while
// the others wait for it. test/knative builds Knative's binaries with it.
func LockFile(ctx context.Context, path, what string, log io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !told {
			fmt.Fprintf(log, "waiting for another process building %s (lock %s)\n", what, path)
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// goCmd is the go command. `go test` and `go run` put their own toolchain
// first on PATH, so the binaries are built with the Go that runs the tests.
func goCmd() string { return "go" }
