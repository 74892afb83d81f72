// Package knativetest installs Knative's own CRDs of the objects tidal's
// Knative mode reads and writes into a test cluster: the PodAutoscaler of
// knative.dev/serving v0.50.0 (config/core/300-resources/podautoscaler.yaml)
// and the ServerlessService of the knative.dev/networking it requires
// (config/serverlessservice.yaml), read from the Go module cache at the
// versions test/benchknative requires (`go mod download` there fetches them
// through the module proxy when the cache lacks them). For tests only.
package knativetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/tidalscale/tidal/test/cluster"
)

var (
	mu        sync.Mutex
	installed = map[*cluster.Cluster]bool{}
)

// InstallCRDs installs the CRDs into c once per process.
func InstallCRDs(ctx context.Context, c *cluster.Cluster) error {
	mu.Lock()
	defer mu.Unlock()
	if installed[c] {
		return nil
	}
	dir, err := crdDir(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := c.InstallCRDs(ctx, dir); err != nil {
		return err
	}
	installed[c] = true
	return nil
}

// crdDir copies the two CRDs into a new directory.
func crdDir(ctx context.Context) (string, error) {
	dirs := map[string]string{}
	for _, mod := range []string{"knative.dev/serving", "knative.dev/networking"} {
		dir, err := moduleDir(ctx, mod)
		if err != nil {
			return "", err
		}
		dirs[mod] = dir
	}
	tmp, err := os.MkdirTemp("", "knative-crds")
	if err != nil {
		return "", err
	}
	for dst, src := range map[string]string{
		"podautoscaler.yaml":     filepath.Join(dirs["knative.dev/serving"], "config", "core", "300-resources", "podautoscaler.yaml"),
		"serverlessservice.yaml": filepath.Join(dirs["knative.dev/networking"], "config", "serverlessservice.yaml"),
	} {
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, dst), b, 0o600)
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			return "", fmt.Errorf("knative CRD %s: %w", dst, err)
		}
	}
	return tmp, nil
}

// moduleDir is the module cache's directory of mod at the version
// test/benchknative requires.
func moduleDir(ctx context.Context, mod string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	modDir := filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "benchknative")
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = modDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s in %s: %w", mod, modDir, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no module directory: %s", mod, m.Error)
	}
	return m.Dir, nil
}
