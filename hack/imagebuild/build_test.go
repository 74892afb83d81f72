package imagebuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePlatform(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, err string
	}{
		{in: "linux/amd64", want: "linux/amd64"},
		{in: "linux/arm/v7", want: "linux/arm/v7"},
		{in: "linux", err: `platform "linux": want os/arch`},
		{in: "linux/", err: "want os/arch"},
		{in: "/amd64", err: "want os/arch"},
		{in: "a/b/c/d", err: "want os/arch"},
	}
	for _, tt := range tests {
		p, err := ParsePlatform(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParsePlatform(%q) err %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePlatform(%q): %v", tt.in, err)
			continue
		}
		got := p.OS + "/" + p.Architecture
		if p.Variant != "" {
			got += "/" + p.Variant
		}
		if got != tt.want {
			t.Errorf("ParsePlatform(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestDigestOf(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 32)
	tests := []struct {
		printed, want string
	}{
		{printed: "bin/image/tidal-decider@sha256:" + hex, want: "sha256:" + hex},
		{printed: "127.0.0.1:5000/tidal/tidal-decider@sha256:" + hex, want: "sha256:" + hex},
		{printed: "ghcr.io/x/tidal-decider:0.1.0"},
		{printed: "x@sha256:" + hex[:63]},
		{printed: "x@sha256:" + strings.ToUpper(hex)},
	}
	for _, tt := range tests {
		got, err := digestOf(tt.printed)
		if tt.want == "" {
			if err == nil {
				t.Errorf("digestOf(%q) = %s, want an error", tt.printed, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("digestOf(%q) = %q, %v; want %q", tt.printed, got, err, tt.want)
		}
	}
}

// TestBuildRefuses checks bad options and a ko that fails or prints no
// reference come back as errors that say what, before or instead of an image.
func TestBuildRefuses(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "charts", "tidal"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "charts", "tidal", "Chart.yaml"), []byte("name: tidal\nappVersion: \"9.9.9\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := Options{Dir: root, Out: t.TempDir(), Revision: strings.Repeat("a", 40), Time: time.Unix(1, 0),
		Services: []string{"decider"}, Platforms: []string{"linux/amd64"}}
	tests := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"no dir", func(o *Options) { o.Dir = "" }, "Dir is empty"},
		{"no out", func(o *Options) { o.Out = "" }, "Out is empty"},
		{"unknown service", func(o *Options) { o.Services = []string{"scheduler"} }, `service "scheduler": want one of`},
		{"bad platform", func(o *Options) { o.Platforms = []string{"amd64"} }, `platform "amd64"`},
		{"ko fails", func(o *Options) { o.Ko = []string{"sh", "-c", "echo boom >&2; exit 3", "ko"} }, "boom"},
		{"ko prints no reference", func(o *Options) { o.Ko = []string{"sh", "-c", "echo done", "ko"} }, `ko printed "done"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := base
			tt.mod(&o)
			imgs, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build: %v, %v; want an error containing %q", imgs, err, tt.want)
			}
		})
	}
}

// TestValues checks images.yaml names the registry, the tag and each
// service's digest under the keys the chart reads.
func TestValues(t *testing.T) {
	t.Parallel()
	d := "sha256:" + strings.Repeat("0", 64)
	got := string(Values([]Image{{Service: "collector", Digest: d}}, Options{Revision: "abc", Tag: "1.2.3"}, "r.example/t"))
	for _, want := range []string{"image:\n  registry: \"r.example/t\"\n  tag: \"1.2.3\"\n", "collector:\n  image:\n    digest: " + d + "\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("Values:\n%s\nlacks %q", got, want)
		}
	}
}

// TestLayoutPathsKoRefuses: ko names a layout's images by its path, so a
// path with capitals (mktemp's, a home directory's) is written elsewhere
// and moved, whole, to where the caller asked.
func TestLayoutPathsKoRefuses(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{{"/tmp/tidal-image/tidal-collector", true}, {"/tmp/tmp.h50zaFlvib/tidal-collector", false}, {"/home/a b/x", false}} {
		if got := repoPathRE.MatchString(c.path); got != c.ok {
			t.Errorf("repoPathRE(%q) = %v, want %v", c.path, got, c.ok)
		}
	}
	from := filepath.Join(t.TempDir(), "src")
	to := filepath.Join(t.TempDir(), "Dst")
	if err := os.MkdirAll(filepath.Join(from, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(from, "blobs", "sha256", "abc"), []byte("layer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := moveDir(from, to); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(to, "blobs", "sha256", "abc")); err != nil || string(b) != "layer" {
		t.Errorf("moved blob = %q, %v; want %q", b, err, "layer")
	}
}
