// Command conformance replays test vectors produced by running Knative's, riff's
// and KEDA's own code against tidal's strategies and prints one line per file.
//
// Usage: conformance DIR
//
// Every *.json file in DIR is recognised by its content (not its name), replayed
// by the family that claims it, and reported as "PASS <file>" or
// "FAIL <file>: <where> <field> want <x> got <y>" (the first mismatch only).
// The last line is "N passed, M failed". The exit status is non-zero when any
// file fails or when DIR holds no vector at all.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// family replays one kind of vector file.
type family struct {
	// name is used only in diagnostics.
	name string
	// match reports whether a decoded top-level JSON object belongs to this family.
	match func(doc map[string]json.RawMessage) bool
	// replay runs the whole file and returns nil, a *mismatch for the first
	// difference, or another error when the file cannot be replayed.
	replay func(raw []byte) error
}

// mismatch is the first difference between a vector and tidal's result.
type mismatch struct {
	at    string // tick, poll or case, e.g. "t_ms=4000" or "case 7 (name)"
	field string
	want  any
	got   any
}

func (m *mismatch) Error() string {
	return fmt.Sprintf("%s %s want %v got %v", m.at, m.field, m.want, m.got)
}

// families lists every family in the order they are tried; each family file
// contributes its own slice.
func families() []family {
	var all []family
	all = append(all, knativeFamilies...)
	all = append(all, riffFamilies...)
	all = append(all, kedaFamilies...)
	return all
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance DIR")
		os.Exit(2)
	}
	passed, failed, err := run(os.Stdout, os.Args[1], families())
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	if failed > 0 || passed == 0 {
		os.Exit(1)
	}
}

// run replays every JSON file directly inside dir and writes the report to w.
func run(w io.Writer, dir string, fams []family) (passed, failed int, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if ferr := replayFile(p, fams); ferr != nil {
			failed++
			fmt.Fprintf(w, "FAIL %s: %v\n", p, ferr)
			continue
		}
		passed++
		fmt.Fprintf(w, "PASS %s\n", p)
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", passed, failed)
	if len(paths) == 0 {
		return 0, 0, fmt.Errorf("no *.json vector in %s", dir)
	}
	return passed, failed, nil
}

var errUnrecognised = errors.New("file - - want a known vector family got unrecognised content")

func replayFile(path string, fams []family) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("file json - want a JSON object got error %w", err)
	}
	for _, f := range fams {
		if f.match(doc) {
			return f.replay(raw)
		}
	}
	return errUnrecognised
}
