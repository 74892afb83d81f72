package server

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

// ParseConfigDir parses the keys ReadConfigDir reads of dir, the value of
// --flag; an error names the flag and the dir.
func ParseConfigDir[T any](flag, dir string, parse func(map[string]string) (T, error)) (T, error) {
	data, err := ReadConfigDir(dir)
	var cfg T
	if err == nil {
		cfg, err = parse(data)
	}
	if err != nil {
		return cfg, fmt.Errorf("--%s %s: %w", flag, dir, err)
	}
	return cfg, nil
}
