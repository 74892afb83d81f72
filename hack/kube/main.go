// Command kube is one multi-call binary holding the Kubernetes control plane
// that tidal's tests and `make run` start on a single machine: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler.
//
// Linking the four into one binary means the packages they share (client-go,
// apiserver, grpc, etcd's client, ...) compile and link once: a cold build on
// two cores takes a few minutes instead of four times that, and the cache holds
// one ~200 MB file instead of four of 120-170 MB each.
//
// The component is chosen by the first argument, or by the name the binary was
// invoked as (so a symlink named kube-apiserver works too):
//
//	kube etcd --data-dir ...
//	kube kube-apiserver --etcd-servers ...
//
// This module has its own go.mod so the project's go.mod does not pull in
// k8s.io/kubernetes. k8s.io/kubernetes replaces its staging modules with
// relative paths, which `go install pkg@version` refuses, so every staging
// module is replaced here with its published v0.37.2 release instead.
//
// Build it with test/cluster (cluster.EnsureBinaries, or
// `go run ./test/cluster/cmd/kubecache`), which also builds kwok from
// ./kwok, caches both under ${XDG_CACHE_HOME:-~/.cache}/tidal/kube-<version>/
// and passes the version ldflags the API server needs to report a version
// kubectl can parse.
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	_ "time/tzdata" // CronJob time zones, as the upstream commands do

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// components maps a component name to its entry point. Each entry point gets
// the component's own arguments (without the component name) and returns the
// process exit code.
var components = map[string]func(args []string) int{
	"etcd": func(args []string) int {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	},
	"kube-apiserver": func(args []string) int {
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-controller-manager": func(args []string) int {
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-scheduler": func(args []string) int {
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	run, ok := components[name]
	if !ok && len(args) > 0 {
		name, args = args[0], args[1:]
		run, ok = components[name]
	}
	if !ok {
		names := slices.Sorted(maps.Keys(components))
		fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [flags]\ncomponents: %s\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run(args))
}
