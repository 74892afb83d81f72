// Command servingbuild builds Knative Serving's controller, autoscaler and activator (v0.50.0) into
// the cache tests use, printing where: `cd test/knative && go run
// ./cmd/servingbuild`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidalscale/tidal/test/knative/serving"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := serving.ModuleDir()
	if err == nil {
		var bins serving.Binaries
		if bins, err = serving.EnsureBinaries(ctx, dir, os.Stderr); err == nil {
			fmt.Println(bins.Controller)
			fmt.Println(bins.Autoscaler)
			fmt.Println(bins.Activator)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "servingbuild:", err)
	os.Exit(1)
}
