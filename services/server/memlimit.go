package server

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit the Go heap
// aims to stay under, leaving the rest for stacks, the runtime and what the
// kernel counts against the cgroup besides the heap.
const memoryLimitShare = 0.9

// cgroupMemoryFiles are where a container's memory limit is read: cgroup v2,
// then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// SetMemoryLimit gives the Go runtime a soft memory limit of 90 % of the
// container's (cgroup) memory limit, unless GOMEMLIMIT sets one: without
// it the heap grows to twice what is live before a collection, past a limit
// the runtime could have kept under. It returns the limit set (0: none) and
// where it came from.
func SetMemoryLimit() (limit int64, source string, err error) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT=" + v, nil // the runtime read it at start
	}
	limit, source, err = cgroupMemoryLimit(os.DirFS("/"), cgroupMemoryFiles)
	if err != nil || limit == 0 {
		return 0, source, err
	}
	limit = SoftMemoryLimit(limit)
	debug.SetMemoryLimit(limit)
	return limit, source, nil
}

// SoftMemoryLimit is the Go runtime's memory limit SetMemoryLimit sets in
// a container whose memory limit is container bytes.
func SoftMemoryLimit(container int64) int64 {
	return int64(float64(container) * memoryLimitShare)
}

// cgroupMemoryLimit reads the first of files (paths from the root of fsys)
// that exists: its limit in bytes, 0 when it says there is none.
func cgroupMemoryLimit(fsys fs.FS, files []string) (int64, string, error) {
	for _, f := range files {
		b, err := fs.ReadFile(fsys, strings.TrimPrefix(f, "/"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, f, fmt.Errorf("memory limit: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, f, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, f, fmt.Errorf("memory limit in %s: not a byte count: %q", f, v[:min(len(v), 32)])
		}
		// cgroup v1 says "no limit" with a page-rounded MaxInt64.
		if n >= math.MaxInt64/2 {
			return 0, f, nil
		}
		return n, f, nil
	}
	return 0, "", nil
}
