package pareto

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "front.png")
	sweep := Series{Name: "fixed", Points: []Point{{X: 1, Y: 100, Label: "0"}, {X: 3, Y: 60, Label: "10m"}, {X: 9, Y: 20, Label: "1h"}}}
	one := Series{Name: "predictive", Points: []Point{{X: 2, Y: 15}}}
	panels := []Panel{
		{Title: "p75", XLabel: "idle pod-hours", YLabel: "%", Series: []Series{sweep, one}},
		{Title: "p50", XLabel: "idle pod-hours", YLabel: "%", Series: []Series{sweep, {Name: "empty"}, one}},
	}
	if err := Write(path, panels); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// Two panels one under the other: taller than wide.
	if b := img.Bounds(); b.Dy() <= b.Dx() {
		t.Errorf("image %v: want two panels stacked", b)
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	ok := Panel{Title: "t", Series: []Series{{Name: "s", Points: []Point{{X: 1, Y: 1}}}}}
	for _, tc := range []struct {
		name   string
		path   string
		panels []Panel
		want   string
	}{
		{"no panel", filepath.Join(dir, "a.png"), nil, "no panel"},
		{"no points", filepath.Join(dir, "b.png"), []Panel{{Title: "empty", Series: []Series{{Name: "s"}}}}, "empty: no points"},
		{"unwritable", filepath.Join(dir, "missing", "c.png"), []Panel{ok}, "pareto"},
	} {
		if err := Write(tc.path, tc.panels); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
