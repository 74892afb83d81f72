package knativeconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReadConfigDir reads a mounted ConfigMap: every regular file whose name does
// not start with '.' is a key, its trimmed content the value (Kubernetes also
// mounts ..data links, which are skipped). An empty dir means no keys.
func ReadConfigDir(dir string) (map[string]string, error) {
	out := map[string]string{}
	if dir == "" {
		return out, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read config directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read config key %s: %w", e.Name(), err)
		}
		out[e.Name()] = strings.TrimSpace(string(b))
	}
	return out, nil
}
