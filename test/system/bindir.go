package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// binDirPrefix names the binary directories BuildTemp makes under
// os.TempDir(), suffixed with the owning process id.
const binDirPrefix = "tidal-bin-"

// BuildTemp builds the three binaries into a new directory owned by this
// process and returns it; the caller removes it. Directories left by
// processes that died without cleaning up are removed first, so a killed
// test run leaves nothing behind for long.
func BuildTemp(ctx context.Context, log io.Writer) (string, error) {
	reapBinDirs(os.TempDir())
	dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("binary directory: %w", err)
	}
	if err := Build(ctx, dir, log); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

func reapBinDirs(root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // its owner still runs
		}
		_ = os.RemoveAll(d)
	}
}
