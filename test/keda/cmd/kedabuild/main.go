// Command kedabuild builds KEDA's operator and metrics API server (v2.21.0)
// into the cache tests use, printing where: `cd test/keda && go run
// ./cmd/kedabuild`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidalscale/tidal/test/keda/operator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := operator.ModuleDir()
	if err == nil {
		var bins operator.Binaries
		if bins, err = operator.EnsureBinaries(ctx, dir, os.Stderr); err == nil {
			fmt.Println(bins.Operator)
			fmt.Println(bins.Adapter)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "kedabuild:", err)
	os.Exit(1)
}
