package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/knative/serving"
	"github.com/tidalscale/tidal/test/system"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// binaries returns Knative's controller (cached across runs by
// test/knative/serving) and a directory of tidal's three binaries (built
// from the Go build cache, removed when t ends), built before the test's
// clocks start.
func binaries(t *testing.T) (serving.Binaries, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir, err := serving.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	kn, err := serving.EnsureBinaries(ctx, dir, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	tidalDir, err := system.BuildTemp(ctx, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tidalDir) })
	return kn, tidalDir
}

// activatorFront is the loopback address the revisions' public Service
// names resolve to for tidal's actuator, serving h on port 80 (the probe
// port of http1 revisions, knative.dev/networking ServiceHTTPPort). It
// picks a free address in 127.2.0.0/16, outside the clusters' pod ranges.
func activatorFront(t *testing.T, h http.Handler) string {
	t.Helper()
	var ln net.Listener
	var err error
	for range 20 {
		ip := fmt.Sprintf("127.2.%d.%d", 1+rand.IntN(254), 1+rand.IntN(254))
		if ln, err = net.Listen("tcp", net.JoinHostPort(ip, "80")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("listen on port 80 of a loopback address (the activator probe's port; needs root): %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).IP.String()
}

// actuatorWithHosts returns a binary directory holding tidal's collector
// and decider from tidalDir and, as tidal-actuator, tidal's actuator run by
// withHosts.
func actuatorWithHosts(t *testing.T, tidalDir string, hosts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, svc := range []string{"collector", "decider"} {
		if err := os.Symlink(filepath.Join(tidalDir, "tidal-"+svc), filepath.Join(dir, "tidal-"+svc)); err != nil {
			t.Fatal(err)
		}
	}
	withHosts(t, filepath.Join(tidalDir, "tidal-actuator"), filepath.Join(dir, "tidal-actuator"), hosts)
	return dir
}

// withHosts writes at wrapper a script that runs bin, with the script's
// arguments, in a mount namespace of its own whose /etc/hosts is the
// machine's plus hosts (name → address): the cluster DNS the activator
// probe's Service names need, for tidal's actuator and for Knative's
// autoscaler. It needs root and util-linux's unshare.
func withHosts(t *testing.T, bin, wrapper string, hosts map[string]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a private /etc/hosts needs root (unshare --mount and mount --bind)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("a private /etc/hosts needs util-linux's unshare: %v", err)
	}
	orig, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(orig)
	b.WriteString("\n# test/knative/serving/e2e: the revisions' public Services\n")
	for name, ip := range hosts {
		fmt.Fprintf(&b, "%s %s\n", ip, name)
	}
	hostsFile := wrapper + ".hosts"
	if err := os.WriteFile(hostsFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// unshare execs the shell, the shell execs bin: one process, so the
	// harness's signals and parent-death signal reach it.
	script := fmt.Sprintf("#!/bin/sh\nexec %s --mount --propagation private sh -c 'mount --bind \"$1\" /etc/hosts && shift && exec \"$@\"' sh %s %s \"$@\"\n",
		unshare, hostsFile, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
