// Package image_test builds tidal's images as `make image` does (ko, through
// hack/imagebuild) into OCI layouts and checks what a cluster would run: each
// image's config and platforms, the binary inside for this machine running
// and serving health, a push to a registry that speaks the registry protocol
// (go-containerregistry's, on loopback) and a pull back by digest, and the
// chart rendered with those digests.
//
// `make prepare` runs the same build first, so here ko only links.
package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/hack/imagebuild"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

// buildTimeout bounds one build of the three images. With `make prepare`'s
// build cache ko only links: six links of about 3 s each on an idle machine.
const buildTimeout = 8 * time.Minute

var tmpRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidal-image-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpRoot = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// built is one run of imagebuild.Build.
type built struct {
	out    string
	images map[string]imagebuild.Image
	took   time.Duration
}

func build(o imagebuild.Options) (*built, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	o.Dir = rel.RepoRoot()
	start := time.Now()
	images, err := imagebuild.Build(ctx, o)
	if err != nil {
		return nil, err
	}
	b := &built{out: o.Out, images: map[string]imagebuild.Image{}, took: time.Since(start)}
	for _, img := range images {
		b.images[img.Service] = img
	}
	return b, nil
}

// layouts is the three images written as OCI layouts, as `make image` does
// without a registry; built once per test binary.
var layouts = sync.OnceValues(func() (*built, error) {
	return build(imagebuild.Options{Out: filepath.Join(tmpRoot, "layout")})
})

func mustLayouts(t *testing.T) *built {
	t.Helper()
	b, err := layouts()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// head is the commit the images are built from and its committer time.
func head(t *testing.T) (string, time.Time) {
	t.Helper()
	out, err := exec.Command("git", "-C", rel.RepoRoot(), "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	rev, ct, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		t.Fatalf("git log printed %q: %v", out, err)
	}
	return rev, time.Unix(sec, 0).UTC()
}

// chartUser is the chart's podSecurityContext user and group.
func chartUser(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rel.RepoRoot(), "charts", "tidal", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		PodSecurityContext struct {
			RunAsUser  int  `json:"runAsUser"`
			RunAsGroup int  `json:"runAsGroup"`
			NonRoot    bool `json:"runAsNonRoot"`
		} `json:"podSecurityContext"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !v.PodSecurityContext.NonRoot || v.PodSecurityContext.RunAsUser == 0 {
		t.Fatalf("chart podSecurityContext %+v: want runAsNonRoot and a non-zero runAsUser", v.PodSecurityContext)
	}
	return fmt.Sprintf("%d:%d", v.PodSecurityContext.RunAsUser, v.PodSecurityContext.RunAsGroup)
}

func platformString(p *v1.Platform) string {
	if p == nil {
		return "<none>"
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// files reads an image's flattened filesystem: each regular file's or
// directory's header, and the contents of the files named in want.
func files(t *testing.T, img v1.Image, want ...string) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs := map[string]*tar.Header{}
	bodies := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the image's filesystem: %v", err)
		}
		n := strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "/")
		hdrs[n] = h
		if slices.Contains(want, n) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("reading %s: %v", n, err)
			}
			bodies[n] = b
		}
	}
	return hdrs, bodies
}

// specBaseName is the OCI annotation naming the base an image was built on;
// ko sets it.
const specBaseName = "org.opencontainers.image.base.name"

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestStaticBase checks the offline base: the same digest every time, one
// image per platform, running as the chart's user, with that user in
// /etc/passwd and nothing to execute.
func TestStaticBase(t *testing.T) {
	t.Parallel()
	a, err := imagebuild.StaticBase(imagebuild.Platforms)
	if err != nil {
		t.Fatal(err)
	}
	b, err := imagebuild.StaticBase(imagebuild.Platforms)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of the static base: digests %s and %s, want the same", da, db)
	}
	// Validated as ko reads it: written to an OCI layout and read back.
	lp, err := layout.Write(t.TempDir(), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(a); err != nil {
		t.Fatal(err)
	}
	if back, err := lp.ImageIndex(); err != nil {
		t.Fatal(err)
	} else if back, err = back.ImageIndex(da); err != nil {
		t.Fatal(err)
	} else if err := validate.Index(back); err != nil {
		t.Errorf("static base, read back from an OCI layout, is not a valid index: %v", err)
	}
	im, err := a.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, platformString(d.Platform))
		img, err := a.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cf.OS + "/" + cf.Architecture; got != platformString(d.Platform) {
			t.Errorf("image for %s has config platform %s", platformString(d.Platform), got)
		}
		if got, want := cf.Config.User, chartUser(t); got != want {
			t.Errorf("%s: User %q, want the chart's %q", platformString(d.Platform), got, want)
		}
		hdrs, bodies := files(t, img, "etc/passwd", "etc/group")
		uid, gid, _ := strings.Cut(cf.Config.User, ":")
		if want := "nonroot:x:" + uid + ":" + gid + ":"; !strings.Contains(string(bodies["etc/passwd"]), want) {
			t.Errorf("/etc/passwd %q lacks %q", bodies["etc/passwd"], want)
		}
		if want := "nonroot:x:" + gid + ":"; !strings.Contains(string(bodies["etc/group"]), want) {
			t.Errorf("/etc/group %q lacks %q", bodies["etc/group"], want)
		}
		for n, h := range hdrs {
			if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
				t.Errorf("base holds an executable %s", n)
			}
			if !h.ModTime.Equal(time.Unix(0, 0)) {
				t.Errorf("%s has time %v, want the epoch", n, h.ModTime)
			}
		}
	}
	if want := imagebuild.Platforms; !slices.Equal(plats, want) {
		t.Errorf("static base platforms %v, want %v", plats, want)
	}
}

// TestImageConfig checks each layout holds one multi-platform index whose
// images run the service's static binary as the chart's user, labelled with
// the commit they were built from and created at its time.
func TestImageConfig(t *testing.T) {
	b := mustLayouts(t)
	t.Logf("built three images for %v in %v", imagebuild.Platforms, b.took.Round(time.Millisecond))
	rev, commitTime := head(t)
	version, err := imagebuild.ChartAppVersion(rel.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	user := chartUser(t)
	base, err := imagebuild.StaticBase(imagebuild.Platforms)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := base.Digest()
	if err != nil {
		t.Fatal(err)
	}
	staticBase := imagebuild.StaticBaseName + "@" + bd.String()
	for _, svc := range imagebuild.Services {
		t.Run(svc, func(t *testing.T) {
			img := b.images[svc]
			p, err := layout.FromPath(img.Layout)
			if err != nil {
				t.Fatal(err)
			}
			top, err := p.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			tm, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(tm.Manifests) != 1 || tm.Manifests[0].Digest.String() != img.Digest {
				t.Fatalf("layout %s lists %+v, want one manifest %s", img.Layout, tm.Manifests, img.Digest)
			}
			if mt := tm.Manifests[0].MediaType; mt != types.OCIImageIndex {
				t.Fatalf("tidal-%s is %s, want an OCI image index", svc, mt)
			}
			idx, err := top.ImageIndex(tm.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Index(idx); err != nil {
				t.Errorf("tidal-%s: not a valid index: %v", svc, err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if got := im.Annotations[specBaseName]; got != staticBase {
				t.Errorf("tidal-%s: built on %q, want the static base %q", svc, got, staticBase)
			}
			var plats []string
			for _, d := range im.Manifests {
				plat := platformString(d.Platform)
				plats = append(plats, plat)
				child, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				cf, err := child.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				entry := "/ko-app/" + svc
				if want := []string{entry}; !slices.Equal(cf.Config.Entrypoint, want) {
					t.Errorf("%s: entrypoint %q, want %q", plat, cf.Config.Entrypoint, want)
				}
				if cf.Config.User != user {
					t.Errorf("%s: user %q, want the chart's %q", plat, cf.Config.User, user)
				}
				labels := map[string]string{
					imagebuild.LabelSource:   imagebuild.Source,
					imagebuild.LabelRevision: rev,
					imagebuild.LabelVersion:  version,
					imagebuild.LabelTitle:    "tidal-" + svc,
				}
				for k, want := range labels {
					if got := cf.Config.Labels[k]; got != want {
						t.Errorf("%s: label %s = %q, want %q", plat, k, got, want)
					}
				}
				if !cf.Created.Equal(commitTime) {
					t.Errorf("%s: created %v, want the commit's time %v", plat, cf.Created, commitTime)
				}
				hdrs, bodies := files(t, child, strings.TrimPrefix(entry, "/"))
				for _, sh := range []string{"bin/sh", "bin/bash", "bin/busybox"} {
					if _, ok := hdrs[sh]; ok {
						t.Errorf("%s: image has /%s; want no shell", plat, sh)
					}
				}
				h := hdrs[strings.TrimPrefix(entry, "/")]
				if h == nil || h.Mode&0o005 != 0o005 {
					t.Fatalf("%s: %s missing or not readable and executable by the image's user (%v)", plat, entry, h)
				}
				f, err := elf.NewFile(bytes.NewReader(bodies[strings.TrimPrefix(entry, "/")]))
				if err != nil {
					t.Fatalf("%s: %s: %v", plat, entry, err)
				}
				if want := elfMachine[d.Platform.Architecture]; f.Machine != want {
					t.Errorf("%s: %s is built for %v, want %v", plat, entry, f.Machine, want)
				}
				for _, prog := range f.Progs {
					if prog.Type == elf.PT_INTERP {
						t.Errorf("%s: %s has a dynamic loader (PT_INTERP): not static", plat, entry)
					}
				}
			}
			if want := imagebuild.Platforms; !slices.Equal(plats, want) {
				t.Errorf("tidal-%s platforms %v, want %v", svc, plats, want)
			}
		})
	}
}

// TestImageBinariesServe takes each image's binary for this machine out of
// its layer and runs the three as a system (actuator with the in-memory
// scaler, decider, collector taking pushed stats): each must serve gRPC
// health and its HTTP /healthz and /readyz.
func TestImageBinariesServe(t *testing.T) {
	b := mustLayouts(t)
	host := "linux/" + goruntime.GOARCH
	if !slices.Contains(imagebuild.Platforms, host) {
		t.Skipf("no image for this machine's platform %s", host)
	}
	binDir := t.TempDir()
	for _, svc := range imagebuild.Services {
		img := b.images[svc]
		p, err := layout.FromPath(img.Layout)
		if err != nil {
			t.Fatal(err)
		}
		h, err := v1.NewHash(img.Digest)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		if idx, err = idx.ImageIndex(h); err != nil {
			t.Fatal(err)
		}
		child := platformImage(t, idx, host)
		entry := "ko-app/" + svc
		_, bodies := files(t, child, entry)
		if len(bodies[entry]) == 0 {
			t.Fatalf("tidal-%s for %s has no /%s", svc, host, entry)
		}
		if err := os.WriteFile(filepath.Join(binDir, "tidal-"+svc), bodies[entry], 0o755); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logDir := t.TempDir()
	start := func(svc string, args ...string) *system.Proc {
		p, err := system.NewProc(svc, binDir, svc, logDir, args...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx, 30*time.Second); err != nil {
			t.Fatalf("tidal-%s from the image: %v", svc, err)
		}
		t.Cleanup(func() {
			if err := p.Stop(10 * time.Second); err != nil {
				t.Errorf("tidal-%s: %v", svc, err)
			}
			if t.Failed() {
				testkit.KeepLog(t, svc, p.LogTail(1<<20))
			}
		})
		return p
	}
	act := start("actuator", "--scaler", "memory")
	dec := start("decider", "--actuator-addr", act.GRPCAddr)
	col := start("collector", "--discovery", "push", "--decider-addr", dec.GRPCAddr)
	for _, p := range []*system.Proc{act, dec, col} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := httpOK(ctx, "http://"+p.HTTPAddr+path); err != nil {
				t.Errorf("tidal-%s %s: %v", p.Name, path, err)
			}
		}
	}
}

func platformImage(t *testing.T, idx v1.ImageIndex, plat string) v1.Image {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if platformString(d.Platform) == plat {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("index has no image for %s", plat)
	return nil
}

// httpOK GETs url until it answers 200, for up to 10 s (/readyz may wait
// for a first connection).
func httpOK(ctx context.Context, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not 200 after 10s: %s", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pushed is the three images built again and pushed by ko to an in-process
// registry on loopback, as `make image REGISTRY=...` does.
type pushed struct {
	*built
	registry string
}

var pushOnce = sync.OnceValues(func() (*pushed, error) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	// The server lives as long as the test binary: the tests that read from
	// it share it. 127.0.0.1 is spoken to over plain HTTP.
	reg := strings.TrimPrefix(srv.URL, "http://") + "/tidal"
	// The chart's appVersion as tag, as in the layout build: the version
	// label is part of the digest.
	b, err := build(imagebuild.Options{Out: filepath.Join(tmpRoot, "push"), Registry: reg})
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &pushed{built: b, registry: reg}, nil
})

func mustPushed(t *testing.T) *pushed {
	t.Helper()
	p, err := pushOnce()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPushPullByDigest pushes with ko to a registry speaking the
// distribution protocol and pulls each image back by digest: every blob
// verifies, the tag names the same index, and the digest is the one the
// layout build made from the same commit (the build is reproducible).
func TestPushPullByDigest(t *testing.T) {
	lb := mustLayouts(t)
	pb := mustPushed(t)
	t.Logf("built and pushed three images in %v", pb.took.Round(time.Millisecond))
	version, err := imagebuild.ChartAppVersion(rel.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range imagebuild.Services {
		img := pb.images[svc]
		if want := pb.registry + "/tidal-" + svc; img.Repository != want {
			t.Errorf("tidal-%s pushed to %s, want %s", svc, img.Repository, want)
		}
		if got, want := img.Digest, lb.images[svc].Digest; got != want {
			t.Errorf("tidal-%s: pushed digest %s, layout build's %s: want the same from one commit", svc, got, want)
		}
		ref, err := name.NewDigest(img.Reference())
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if d, _ := idx.Digest(); d.String() != img.Digest {
			t.Errorf("pulled %s, got index %s", ref, d)
		}
		if err := validate.Index(idx); err != nil {
			t.Errorf("pulled %s: %v", ref, err)
		}
		tag, err := name.NewTag(img.Repository + ":" + version)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Head(tag)
		if err != nil {
			t.Fatalf("head %s: %v", tag, err)
		}
		if desc.Digest.String() != img.Digest {
			t.Errorf("%s names %s, want %s", tag, desc.Digest, img.Digest)
		}
	}
}

// TestChartPinsDigests renders the chart with the images.yaml the push wrote
// and checks every Deployment runs its service's pushed image by digest;
// without it, the chart still names tags.
func TestChartPinsDigests(t *testing.T) {
	pb := mustPushed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	objs, err := rel.Render(ctx, rel.Options{Name: "tidal", Namespace: "tidal-system",
		ValuesFiles: []string{filepath.Join(pb.out, "images.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for svc, img := range pb.images {
		want["tidal-"+svc] = img.Reference()
	}
	deps := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		deps++
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		w, ok := want[d.Name]
		if !ok {
			t.Errorf("Deployment %s is none of %v", d.Name, imagebuild.Services)
			continue
		}
		spec := d.Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if c.Image != w {
				t.Errorf("Deployment %s container %s: image %q, want %q", d.Name, c.Name, c.Image, w)
			}
		}
	}
	if deps != len(imagebuild.Services) {
		t.Errorf("rendered %d Deployments, want %d", deps, len(imagebuild.Services))
	}

	// A digest that is not sha256:<64 hex> is refused before anything
	// reaches a cluster, naming the value.
	bad := "actuator.image.digest=" + strings.TrimPrefix(pb.images["actuator"].Digest, "sha256:")
	if _, err := rel.Render(ctx, rel.Options{Name: "tidal", Namespace: "tidal-system", Set: []string{bad}}); err == nil ||
		!strings.Contains(err.Error(), "/actuator/image/digest") {
		t.Errorf("helm template --set %s: err %v, want a schema error naming /actuator/image/digest", bad, err)
	}

	objs, err = rel.Render(ctx, rel.Options{Name: "tidal", Namespace: "tidal-system"})
	if err != nil {
		t.Fatal(err)
	}
	version, err := imagebuild.ChartAppVersion(rel.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		if got, w := d.Spec.Template.Spec.Containers[0].Image, imagebuild.DefaultRegistry+"/"+d.Name+":"+version; got != w {
			t.Errorf("default values: Deployment %s image %q, want %q (make image's name, the chart's appVersion)", d.Name, got, w)
		}
	}
}

// TestBuildOnPulledBase is the release path (make image BASE=...@sha256:...):
// ko pulls the base by digest from a registry and builds on it. The base
// here is the static base for linux/amd64 with a label of its own, served by
// go-containerregistry's registry on loopback; one service, one platform.
func TestBuildOnPulledBase(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	idx, err := imagebuild.StaticBase([]string{"linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	baseImg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := baseImg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Labels = map[string]string{"dev.tidal.test.base": "pulled"}
	if baseImg, err = mutate.ConfigFile(baseImg, cf); err != nil {
		t.Fatal(err)
	}
	d, err := baseImg.Digest()
	if err != nil {
		t.Fatal(err)
	}
	baseRef, err := name.NewDigest(strings.TrimPrefix(srv.URL, "http://") + "/base@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(baseRef, baseImg); err != nil {
		t.Fatalf("push base %s: %v", baseRef, err)
	}

	b, err := build(imagebuild.Options{Out: filepath.Join(tmpRoot, "pulled-base"), Base: baseRef.String(),
		Services: []string{"decider"}, Platforms: []string{"linux/amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built tidal-decider for linux/amd64 on a pulled base in %v", b.took.Round(time.Millisecond))
	p, err := layout.FromPath(b.images["decider"].Layout)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(b.images["decider"].Digest)
	if err != nil {
		t.Fatal(err)
	}
	img, err := top.Image(h)
	if err != nil {
		t.Fatalf("tidal-decider on a one-platform base: want an image: %v", err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Annotations[specBaseName]; got != baseRef.String() {
		t.Errorf("built on %q, want the pulled base %q", got, baseRef)
	}
	got, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.Labels["dev.tidal.test.base"] != "pulled" {
		t.Errorf("labels %v lack the pulled base's dev.tidal.test.base", got.Config.Labels)
	}
	if want := []string{"/ko-app/decider"}; !slices.Equal(got.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", got.Config.Entrypoint, want)
	}
	if got.Config.User != imagebuild.User {
		t.Errorf("user %q, want %q", got.Config.User, imagebuild.User)
	}
}
