package server

import (
	"fmt"

	"github.com/tidalscale/tidal/knativeconfig"
)

// ParseConfigDir parses the keys knativeconfig.ReadConfigDir reads of dir, the value of
// --flag; an error names the flag and the dir.
func ParseConfigDir[T any](flag, dir string, parse func(map[string]string) (T, error)) (T, error) {
	data, err := knativeconfig.ReadConfigDir(dir)
	var cfg T
	if err == nil {
		cfg, err = parse(data)
	}
	if err != nil {
		return cfg, fmt.Errorf("--%s %s: %w", flag, dir, err)
	}
	return cfg, nil
}
