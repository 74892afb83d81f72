package system

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Services are the three binaries, in the order they are started.
var Services = []string{"actuator", "decider", "collector"}

// moduleRoot is the checkout's root, found from this file's location so
// that tests in any package and `go run` from the root all agree.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles the three binaries into dir as tidal-<service>, writing
// progress to log. The Go build cache makes a rebuild of unchanged code cheap.
func Build(ctx context.Context, dir string, log io.Writer) error {
	root := moduleRoot()
	for _, svc := range Services {
		fmt.Fprintf(log, "building tidal-%s\n", svc)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "tidal-"+svc), "./services/"+svc)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build tidal-%s: %w", svc, err)
		}
	}
	return nil
}
