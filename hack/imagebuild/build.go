package imagebuild

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Services are the three binaries, ./services/NAME, each the image
// REGISTRY/tidal-NAME.
var Services = []string{"collector", "decider", "actuator"}

// Platforms are the default platforms of every image.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// DefaultRegistry is the chart's default image.registry: the name the images
// carry when they are only written to disk.
const DefaultRegistry = "ghcr.io/tidalscale"

// Source is the org.opencontainers.image.source label.
const Source = "https://github.com/tidalscale/tidal"

// OCI annotation keys ko's --image-label sets as config labels.
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// KoModfile is the module that pins ko, relative to the repository root. It
// is not tools/go.mod: ko v0.19.1 needs spf13/viper v1.21.0, which would lift
// golangci-lint's deliberately pinned v1.12.0 there.
const KoModfile = "hack/ko/go.mod"

// Options says what Build builds and where it goes.
type Options struct {
	// Dir is the repository root; ko runs there and reads .ko.yaml.
	Dir string
	// Out is where each image's OCI layout is written (Out/tidal-NAME) when
	// Registry is empty, and where images.yaml goes in either case.
	Out string
	// Registry, when set, is where the images are pushed: Registry/tidal-NAME.
	Registry string
	// Tag is the pushed tag and the org.opencontainers.image.version label;
	// empty means the chart's appVersion.
	Tag string
	// Platforms to build; empty means Platforms.
	Platforms []string
	// Services to build; empty means Services.
	Services []string
	// Base is a base image reference for ko to pull (a release's distroless
	// base, by digest). Empty means StaticBase, made here.
	Base string
	// Revision and Time are the source commit and its time; empty and zero
	// mean git's HEAD and its committer time.
	Revision string
	Time     time.Time
	// Ko is the command that runs ko; empty means
	// `go tool -modfile=hack/ko/go.mod ko`.
	Ko []string
	// Log receives ko's progress; nil discards it.
	Log io.Writer
}

// Image is one built image.
type Image struct {
	Service string
	// Repository is where the image is named: Registry/tidal-NAME (or the
	// default registry's name when only written to disk).
	Repository string
	// Digest is the image index's digest, sha256:...
	Digest string
	// Layout is the OCI layout directory holding the image, when not pushed.
	Layout string
}

// Reference is Repository@Digest.
func (i Image) Reference() string { return i.Repository + "@" + i.Digest }

// Build builds every service's image with ko for every platform, into an OCI
// layout under Out or pushed to Registry, and writes Out/images.yaml, the
// chart values that pin the images by digest.
func Build(ctx context.Context, o Options) ([]Image, error) {
	if o.Dir == "" {
		return nil, errors.New("imagebuild: Dir is empty")
	}
	if o.Out == "" {
		return nil, errors.New("imagebuild: Out is empty")
	}
	// ko runs in Dir; the layouts go where the caller meant.
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	o.Out = out
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	if len(o.Services) == 0 {
		o.Services = Services
	}
	for _, s := range o.Services {
		if !validService(s) {
			return nil, fmt.Errorf("imagebuild: service %.40q: want one of %v", s, Services)
		}
	}
	if o.Tag == "" {
		v, err := ChartAppVersion(o.Dir)
		if err != nil {
			return nil, err
		}
		o.Tag = v
	}
	if o.Revision == "" || o.Time.IsZero() {
		rev, t, err := gitHead(ctx, o.Dir)
		if err != nil {
			return nil, err
		}
		if o.Revision == "" {
			o.Revision = rev
		}
		if o.Time.IsZero() {
			o.Time = t
		}
	}
	if len(o.Ko) == 0 {
		o.Ko = []string{"go", "tool", "-modfile=" + KoModfile, "ko"}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	registry := o.Registry
	if registry == "" {
		registry = DefaultRegistry
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}

	// ko's base image cache (KOCACHE/img) holds the static base, so ko finds
	// it by digest and never asks a registry. A cache of our own per build:
	// nothing stale, nothing shared with a developer's ko.
	kocache, err := os.MkdirTemp("", "tidal-kocache-")
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	defer func() { _ = os.RemoveAll(kocache) }()
	base := o.Base
	if base == "" {
		if base, err = seedBase(kocache, o.Platforms); err != nil {
			return nil, err
		}
	}

	var images []Image
	for _, svc := range o.Services {
		img := Image{Service: svc, Repository: registry + "/tidal-" + svc}
		args := []string{"build", "./services/" + svc,
			"--bare",
			"--platform=" + strings.Join(o.Platforms, ","),
			"--sbom=none",
			"--image-user=" + User,
			"--image-label=" + LabelSource + "=" + Source,
			"--image-label=" + LabelRevision + "=" + o.Revision,
			"--image-label=" + LabelVersion + "=" + o.Tag,
			"--image-label=" + LabelTitle + "=tidal-" + svc,
			"--image-label=" + LabelCreated + "=" + o.Time.UTC().Format(time.RFC3339),
		}
		var koLayout string
		if o.Registry != "" {
			args = append(args, "--push", "--tags="+o.Tag)
		} else {
			img.Layout = filepath.Join(o.Out, "tidal-"+svc)
			// ko appends to a layout; start from none so it holds one index.
			if err := os.RemoveAll(img.Layout); err != nil {
				return nil, fmt.Errorf("imagebuild: %w", err)
			}
			// ko names what it writes by the layout's path, which must then
			// be a valid repository name (lower case, no spaces): a path
			// that is not is written under a temporary one and moved.
			koLayout = img.Layout
			if !repoPathRE.MatchString(img.Layout) {
				tmp, err := os.MkdirTemp("", "tidal-ko-")
				if err != nil {
					return nil, fmt.Errorf("imagebuild: %w", err)
				}
				defer func() { _ = os.RemoveAll(tmp) }()
				koLayout = filepath.Join(tmp, "tidal-"+svc)
				if !repoPathRE.MatchString(koLayout) {
					return nil, fmt.Errorf("imagebuild: ko cannot write a layout to %q nor to the temporary %q: set TMPDIR to a lower-case path", img.Layout, koLayout)
				}
			}
			args = append(args, "--push=false", "--oci-layout-path="+koLayout)
		}
		env := append(os.Environ(),
			"KO_DOCKER_REPO="+img.Repository,
			"KO_DEFAULTBASEIMAGE="+base,
			"KOCACHE="+kocache,
			"SOURCE_DATE_EPOCH="+strconv.FormatInt(o.Time.Unix(), 10),
		)
		fmt.Fprintf(o.Log, "image: ko %s (%s)\n", strings.Join(args, " "), img.Repository)
		ref, err := runKo(ctx, o, env, args)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: tidal-%s: %w", svc, err)
		}
		if img.Digest, err = digestOf(ref); err != nil {
			return nil, fmt.Errorf("imagebuild: tidal-%s: %w", svc, err)
		}
		if koLayout != img.Layout {
			if err := moveDir(koLayout, img.Layout); err != nil {
				return nil, fmt.Errorf("imagebuild: tidal-%s: %w", svc, err)
			}
		}
		images = append(images, img)
	}
	if err := os.WriteFile(filepath.Join(o.Out, "images.yaml"), Values(images, o, registry), 0o644); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	return images, nil
}

func validService(s string) bool {
	for _, v := range Services {
		if s == v {
			return true
		}
	}
	return false
}

// seedBase writes StaticBase into ko's base image cache under kocache and
// returns the reference ko must be given: StaticBaseName@digest. ko looks up
// a digest reference among the cache layout's top-level manifests, then each
// platform's image the same way, so the images are listed there too.
func seedBase(kocache string, platforms []string) (string, error) {
	idx, err := StaticBase(platforms)
	if err != nil {
		return "", err
	}
	p, err := layout.Write(filepath.Join(kocache, "img"), empty.Index)
	if err != nil {
		return "", fmt.Errorf("imagebuild: ko cache: %w", err)
	}
	if err := p.AppendIndex(idx); err != nil {
		return "", fmt.Errorf("imagebuild: ko cache: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", fmt.Errorf("imagebuild: ko cache: %w", err)
	}
	for _, d := range im.Manifests {
		if err := p.AppendDescriptor(d); err != nil {
			return "", fmt.Errorf("imagebuild: ko cache: %w", err)
		}
	}
	dig, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("imagebuild: static base digest: %w", err)
	}
	return StaticBaseName + "@" + dig.String(), nil
}

// runKo runs ko in o.Dir and returns the last line it printed on stdout, the
// built image's reference.
func runKo(ctx context.Context, o Options, env, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, o.Ko[0], append(append([]string{}, o.Ko[1:]...), args...)...)
	cmd.Dir = o.Dir
	cmd.Env = env
	var stdout bytes.Buffer
	var stderr tail
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(o.Log, &stderr)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ko %s: %w\n%s", args[0], err, stderr.String())
	}
	var last string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	if last == "" {
		return "", fmt.Errorf("ko printed no image reference; stderr:\n%s", stderr.String())
	}
	return last, nil
}

var digestRE = regexp.MustCompile(`@(sha256:[0-9a-f]{64})$`)

// digestOf takes the digest from ko's printed reference (NAME@sha256:...,
// where NAME is a repository or, for a layout, its directory).
// repoPathRE is what ko accepts as an OCI layout's path: it names the
// layout's images by it.
var repoPathRE = regexp.MustCompile(`^[a-z0-9_./-]+$`)

// moveDir moves the directory from to to, copying where a rename cannot
// (another file system).
func moveDir(from, to string) error {
	if err := os.Rename(from, to); err == nil {
		return nil
	}
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("move the layout to %s: %w", to, err)
	}
	return nil
}

func digestOf(ref string) (string, error) {
	m := digestRE.FindStringSubmatch(ref)
	if m == nil {
		return "", fmt.Errorf("ko printed %.200q: want a reference ending @sha256:<64 hex>", ref)
	}
	if _, err := name.NewDigest("example.invalid/x@" + m[1]); err != nil {
		return "", fmt.Errorf("ko printed %.200q: %w", ref, err)
	}
	return m[1], nil
}

// Values renders chart values that install exactly these images: the
// registry and tag, and each service's digest.
func Values(images []Image, o Options, registry string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by make image (hack/image) from %s; helm install ... -f this file.\n", o.Revision)
	fmt.Fprintf(&b, "image:\n  registry: %q\n  tag: %q\n", registry, o.Tag)
	for _, img := range images {
		fmt.Fprintf(&b, "%s:\n  image:\n    digest: %s\n", img.Service, img.Digest)
	}
	return []byte(b.String())
}

// ChartAppVersion is charts/tidal/Chart.yaml's appVersion.
func ChartAppVersion(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "charts", "tidal", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("imagebuild: chart version: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "appVersion:"); ok {
			if v = strings.Trim(strings.TrimSpace(v), `"'`); v != "" {
				return v, nil
			}
		}
	}
	return "", errors.New("imagebuild: charts/tidal/Chart.yaml has no appVersion")
}

// gitHead returns HEAD's commit and committer time.
func gitHead(ctx context.Context, dir string) (string, time.Time, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("imagebuild: git log in %s (the revision and time label the images): %w", dir, err)
	}
	rev, ct, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, perr := strconv.ParseInt(ct, 10, 64)
	if !ok || perr != nil || len(rev) != 40 {
		return "", time.Time{}, fmt.Errorf("imagebuild: git log printed %.100q: want <commit> <unix time>", out)
	}
	return rev, time.Unix(sec, 0).UTC(), nil
}

// tail keeps the last 8 KiB written to it, for error messages.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 8<<10 {
		t.b = t.b[len(t.b)-8<<10:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
