// Command testcluster builds and runs tidal's single-machine Kubernetes
// control plane (see package test/cluster).
//
//	go run ./test/cluster/cmd/testcluster build   # build or reuse the cached binaries
//	go run ./test/cluster/cmd/testcluster up      # start a cluster, print its kubeconfig, run until interrupted
//
// `up` writes the kubeconfig path to stdout (and to -kubeconfig-link if
// given, as a symlink) so `make run` and people can point kubectl at it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidalscale/tidal/test/cluster"
)

func main() {
	fs := flag.NewFlagSet("testcluster", flag.ExitOnError)
	link := fs.String("kubeconfig-link", "", "With up: also make this path a symlink to the cluster's kubeconfig; empty means none.")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: testcluster build | up [-kubeconfig-link PATH]\n")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cmd, *link); err != nil {
		fmt.Fprintf(os.Stderr, "testcluster %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd, link string) error {
	switch cmd {
	case "build":
		bins, err := cluster.EnsureBinaries(ctx, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Println(bins.Dir)
		return nil
	case "up":
		c, err := cluster.Start(ctx, cluster.Options{})
		if err != nil {
			return err
		}
		defer c.Stop()
		if link != "" {
			_ = os.Remove(link)
			if err := os.Symlink(c.Kubeconfig, link); err != nil {
				return fmt.Errorf("kubeconfig link: %w", err)
			}
			defer func() { _ = os.Remove(link) }()
		}
		fmt.Println(c.Kubeconfig)
		<-ctx.Done()
		return nil
	default:
		return fmt.Errorf("unknown command %q: want build or up", cmd)
	}
}
