// Command image builds tidal-collector, tidal-decider and tidal-actuator with
// ko (`make image`): static binaries on an offline base, for linux/amd64 and
// linux/arm64, the same digest from the same commit. Without -registry each
// image is an OCI layout in -out; with it they are pushed. Either way
// -out/images.yaml holds chart values that install them by digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tidalscale/tidal/hack/imagebuild"
	"github.com/tidalscale/tidal/keyval"
)

func main() {
	var o imagebuild.Options
	var platforms, services string
	flag.StringVar(&o.Out, "out", "bin/image", "directory of the OCI layouts (without -registry) and images.yaml")
	flag.StringVar(&o.Registry, "registry", "", "push to REGISTRY/tidal-SERVICE; empty writes OCI layouts to -out")
	flag.StringVar(&o.Tag, "tag", "", "tag pushed and org.opencontainers.image.version; empty means the chart's appVersion")
	flag.StringVar(&platforms, "platforms", strings.Join(imagebuild.Platforms, ","), "comma-separated os/arch list")
	flag.StringVar(&services, "services", strings.Join(imagebuild.Services, ","), "comma-separated services to build")
	flag.StringVar(&o.Base, "base", "", "base image for ko to pull, by digest (e.g. a distroless static image); empty builds the static base offline")
	flag.Parse()
	o.Dir = "."
	o.Platforms = keyval.List(platforms)
	o.Services = keyval.List(services)
	o.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		fmt.Fprintln(os.Stderr, "image: warning: the work tree has uncommitted changes; the images hold them, but their revision label names HEAD")
	}
	images, err := imagebuild.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, img := range images {
		where := img.Layout
		if where == "" {
			where = "pushed"
		}
		fmt.Printf("%s\t%s\n", img.Reference(), where)
	}
	fmt.Fprintf(os.Stderr, "image: chart values pinning these digests: %s/images.yaml\n", o.Out)
}
