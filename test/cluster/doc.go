// Package cluster runs a real Kubernetes control plane on one machine for
// tidal's tests and `make run`: etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler built from Go modules, and kwok faking a node and the
// lifecycle of every pod on it. Deployments, ReplicaSets, the scale
// subresource, CRDs with their validation, RBAC and ServiceAccount tokens
// behave as on any cluster; pods turn Ready within milliseconds and get IPs
// in 127.16.0.0/12, so a test can listen on a pod's IP and be that pod.
//
// # Using it in tests
//
// Tests of one package share one cluster and isolate by namespace:
//
//	func TestMain(m *testing.M) { cluster.Main(m) }
//
//	func TestX(t *testing.T) {
//		c := cluster.Shared(t)      // started on first use; skipped with -short
//		ns := c.Namespace(t)        // deleted when t ends
//		cfg := c.Config()           // *rest.Config with admin rights
//		_ = c.Kubeconfig            // for processes the test starts
//		...
//	}
//
// Start and Stop give a private cluster instead. Options.CRDDirs defaults to
// charts/tidal/crds, which every cluster installs before Start returns.
//
// # Binaries
//
// EnsureBinaries builds hack/kube (one multi-call binary for etcd and the
// three Kubernetes components, so their shared packages link once) and
// hack/kube/kwok into ${XDG_CACHE_HOME:-~/.cache}/tidal/kube-<version>/,
// under a file lock, at nice 10, printing progress to stderr. The cache is
// rebuilt only when the sources under hack/kube change (a stamp of their
// go.mod, go.sum and main.go). A cold build compiles Kubernetes and takes
// about 10 minutes on two cores, so run the first `go test` with
// `-timeout 60m`; later runs reach a Ready cluster in about 5 s.
//
// # Processes
//
// Each component runs in its own process group with SIGKILL as its
// parent-death signal: Stop (or Main, on SIGINT/SIGTERM) terminates the
// groups, and a test binary killed outright takes the control plane with
// it. Its directory under $TMPDIR (data, keys, logs, kubeconfig) is deleted by
// Stop, or by the next Start when its owner died. Ports are free loopback
// ports picked at start; each running cluster holds one of 16 /16 slices of
// 127.16.0.0/12 for its pod IPs (65,534 each, 127.16.0.0/16 for the first),
// locked in $TMPDIR/tidal-podnet-slots, so clusters side by side, from any
// checkout or cache directory, never hand out the same pod address. A
// component that does not come up in time fails Start with the last lines of
// its log.
package cluster
