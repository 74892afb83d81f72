// Package imagebuild builds tidal's three service images with ko, without a
// container engine or network access: `make image` (hack/image) and the
// image tests (test/image) call it.
//
// The images are ko's: one static binary at /ko-app/<name> on a base image.
// The default base is made here, offline and byte for byte the same every
// time (StaticBase): no shell, no libc, only /etc/passwd and /etc/group naming
// the non-root user the chart runs as. A release may pass a distroless base
// by digest instead (Options.Base), which ko pulls.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID and GID of the user every image runs as: distroless's nonroot, the
// chart's podSecurityContext.runAsUser and runAsGroup.
const (
	UID = 65532
	GID = 65532
)

// User is the image config's User: numeric, so the kubelet can verify
// runAsNonRoot without a passwd lookup.
var User = strconv.Itoa(UID) + ":" + strconv.Itoa(GID)

// StaticBaseName is the name StaticBase goes by in ko's base image cache and
// in the images' org.opencontainers.image.base.name annotation. The .invalid
// domain never resolves: the base is never pulled, only read from the cache
// Build fills.
const StaticBaseName = "tidal.invalid/static-base"

// baseEnv is the base's environment; ko adds /ko-app to PATH.
var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

// StaticBase returns an OCI image index with one image per platform
// ("linux/amd64"), each one layer of /etc/passwd, /etc/group, /home/nonroot
// and /tmp, and a config running as User. Every timestamp is the Unix epoch,
// so the digest depends only on the platforms.
func StaticBase(platforms []string) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("static base: no platforms")
	}
	layer, err := baseLayer()
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat, err := ParsePlatform(p)
		if err != nil {
			return nil, err
		}
		img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{CreatedBy: "tidal hack/imagebuild: passwd and group for uid " + strconv.Itoa(UID)},
		})
		if err != nil {
			return nil, fmt.Errorf("static base %s: %w", p, err)
		}
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("static base %s: config: %w", p, err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
		cf.Config.User = User
		cf.Config.Env = baseEnv
		cf.Config.WorkingDir = "/"
		cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
		for i := range cf.History {
			cf.History[i].Created = cf.Created
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, fmt.Errorf("static base %s: config: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &plat},
		})
	}
	return idx, nil
}

// ParsePlatform parses "os/arch" or "os/arch/variant".
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("platform %.40q: want os/arch or os/arch/variant", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// baseLayer is the base's one layer, a gzipped tar written with fixed
// headers (epoch times, no user or group names) so it is the same bytes on
// every machine.
func baseLayer() (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	uid, gid := strconv.Itoa(UID), strconv.Itoa(GID)
	entries := []struct {
		name     string
		mode     int64
		uid, gid int
		body     string
	}{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:" + uid + ":" + gid + ":nonroot:/home/nonroot:/sbin/nologin\n"},
		{name: "etc/group", mode: 0o644, body: "root:x:0:\nnobody:x:65534:\nnonroot:x:" + gid + ":\n"},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID},
		{name: "tmp/", mode: 0o1777},
	}
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			Format:  tar.FormatUSTAR,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("static base layer %s: %w", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			return nil, fmt.Errorf("static base layer %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("static base layer: %w", err)
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
